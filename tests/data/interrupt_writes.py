"""Child process for tests/store/test_interrupts.py: Ctrl-C (a real SIGINT; or SIGTERM inside
``stop_signals_raise``, as ``harness run`` has it) lands at a random moment of a loop of store
writes, TRIALS times; after each, one more write must succeed at once. Prints one JSON
line of what happened.

    python interrupt_writes.py URL TRIALS [INT|TERM]"""

import json
import os
import random
import signal
import sys
import threading
import time

from state.errors import StoreError
from state.interrupts import TerminateRequested, stop_signals_raise
from state.store import Store

url, trials = sys.argv[1], int(sys.argv[2])
signum = signal.SIGTERM if sys.argv[3:] == ["TERM"] else signal.SIGINT
expected = TerminateRequested if signum == signal.SIGTERM else KeyboardInterrupt
term = stop_signals_raise()  # kept: a collected generator would restore the handler
term.__enter__()  # for the whole process; a no-op for SIGINT runs
store = Store.open(url)
failures: list[str] = []
miscounted: list[str] = []
interrupted = 0
for trial in range(trials):
    sid = store.create_session(f"t{trial}", actor="test")
    with store.write(sid, "test") as tx:
        tx.create_todo("target")
    timer = threading.Timer(random.uniform(0.002, 0.03), os.kill, (os.getpid(), signum))
    done = 0
    try:
        timer.start()  # on a loaded machine the signal can land before start() returns
        while True:
            with store.write(sid, "test") as tx:
                tx.emit("todo.noted", todo_id=1, payload={"text": str(done)})
            done += 1
    except expected:
        interrupted += 1
    start = time.monotonic()
    try:
        with store.write(sid, "test") as tx:
            tx.emit("todo.noted", todo_id=1, payload={"text": "after"})
    except StoreError as exc:
        failures.append(f"trial {trial}: {exc} after {time.monotonic() - start:.2f}s")
        continue
    notes = [e.payload["text"] for e in store.events(sid) if e.kind == "todo.noted"]
    # The interrupt may land after a write committed but before its `with` returned.
    if notes[-1] != "after" or notes[:-1] not in ([str(i) for i in range(done)],
                                                  [str(i) for i in range(done + 1)]):
        miscounted.append(f"trial {trial}: {done} writes returned, stored {notes[-3:]}")
store.close()
print(json.dumps({"interrupted": interrupted, "failures": failures, "miscounted": miscounted}))
