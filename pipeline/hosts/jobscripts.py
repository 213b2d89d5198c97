"""The POSIX sh that launches, polls and cancels detached jobs on a host.

Both executors run these same scripts (locally through invoke, remotely through fabric), so
a job behaves the same everywhere and re-attaching needs nothing but the files in its run
directory::

    <workdir>/.harness/runs/<run_id>/
        started     created exclusively (noclobber) by the one launch that wins
        env         only for a batch job, between submission and its start: the job's
                    environment, mode 0600, read and removed by job.sh before the command
                    runs (:mod:`pipeline.hosts.slurm`)
        cmd         the command, redacted, for people
        job.sh      the wrapper below
        pid         the wrapper's pid = the job's process group and session id
        pid_start   the wrapper's start time (/proc/PID/stat field 22), against pid reuse
        log         stdout and stderr of the command
        exit_code   written through a temporary file and mv, so it is never half there
        cancelled   written by cancel() before it signals the group

Every value that reaches these scripts goes through :func:`shlex.quote`. No environment
value ever does: values travel on a shell's standard input or in
its process environment (:class:`StdinEnv`), never in a command line, which any user of the host can read in
``ps`` and ``/proc/PID/cmdline``. Standard library only.
"""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ENV_FILE", "StdinEnv", "cancel_script", "export_lines", "job_wrapper",
           "launch_script", "poll_script", "stdin_env", "write_env_file"]

q = shlex.quote

#: A batch job's environment in its run directory until job.sh has read it.
ENV_FILE = "env"


@dataclass(frozen=True)
class StdinEnv:
    """An environment to send on a shell's standard input: ``data``, the ``export`` lines
    and a random end line (a comment); ``reader``, the shell command that prints them back,
    end line included, for the shell to evaluate or to store; ``end``, that line, by which
    a script knows the lines arrived whole. The reader stops at the end line rather than
    at end of file: over SSH a channel's end of file can follow its data by tens of
    milliseconds (Nagle's algorithm against the server's delayed ACK), on every command."""

    reader: str
    data: bytes
    end: str

    @property
    def prelude(self) -> str:
        """The first lines of a script that takes its environment from its standard
        input. The shell evaluates the lines itself (``sed`` hands them over a pipe), so
        the values are in no argv and in no file; lines cut short run nothing."""
        return (f"_harness_env=$({self.reader})\n"
                f'case $_harness_env in *{q(self.end)}) eval "$_harness_env" ;;\n'
                "  *) echo 'harness: the environment arrived cut short' >&2; exit 1 ;;\n"
                "esac\n"
                "unset _harness_env\n")


def stdin_env(env: Mapping[str, str]) -> StdinEnv:
    """``env`` as :class:`StdinEnv`; names are checked by the executor
    (:func:`pipeline.hosts.executor.check_env`)."""
    lines = export_lines(env)
    end = f"# harness-env-end-{secrets.token_hex(8)}"
    while end in lines:  # a value holding the random end line: practically never
        end = f"# harness-env-end-{secrets.token_hex(8)}"
    return StdinEnv(reader=f"sed {q(f'/^{end}$/q')}", data=f"{lines}{end}\n".encode(),
                    end=end)


def export_lines(env: Mapping[str, str]) -> str:
    """``export NAME='value'`` lines for a shell to evaluate or source."""
    return "".join(f"export {k}={q(v)}\n" for k, v in env.items())


def write_env_file(sent: StdinEnv) -> str:
    """A shell line that stores what ``sent``'s reader prints as :data:`ENV_FILE`, created
    mode 0600 (the umask is set before the file exists, so it is never readable by others,
    not even for a moment), and only when it arrived whole."""
    tmp = f"{ENV_FILE}.tmp"
    return (f"rm -f {tmp} && ( umask 077 && {sent.reader} > {tmp} ) && "
            f"[ \"$(tail -n 1 {tmp})\" = {q(sent.end)} ] && mv -f {tmp} {ENV_FILE} "
            f"|| {{ rm -f {tmp}; echo 'harness: the environment arrived cut short' >&2; "
            "exit 1; }\n")


# Shell functions shared by poll and cancel. A zombie counts as dead: on containers whose
# pid 1 does not reap, a killed wrapper stays a zombie forever and `kill -0` would call it
# alive. The start time guards against the pid having been reused since.
_FUNCTIONS = r"""
alive() {
  [ -s pid ] || return 1
  p=$(cat pid)
  if [ -r "/proc/$p/stat" ]; then
    read -r st 2>/dev/null < "/proc/$p/stat" || return 1
    r=${st##*) }
    set -- $r
    [ "$1" != Z ] || return 1
    [ ! -s pid_start ] || [ "${20}" = "$(cat pid_start)" ]
  elif [ -d /proc/self ]; then
    return 1
  else
    kill -0 "$p" 2>/dev/null
  fi
}
reused() {
  p=$(cat pid)
  [ -r "/proc/$p/stat" ] && [ -s pid_start ] || return 1
  read -r st 2>/dev/null < "/proc/$p/stat" || return 1
  r=${st##*) }
  set -- $r
  [ "${20}" != "$(cat pid_start)" ]
}
group_alive() {
  g=$(cat pid)
  if [ -d /proc/self ]; then
    for f in /proc/[0-9]*/stat; do
      read -r st 2>/dev/null < "$f" || continue
      r=${st##*) }
      set -- $r
      [ "$3" = "$g" ] && [ "$1" != Z ] && return 0
    done
    return 1
  fi
  kill -0 -"$g" 2>/dev/null
}
"""


def job_wrapper(argv: list[str], cwd: str) -> str:
    """``job.sh``: record the pid, run the command in a subshell, write its exit code.

    The wrapper traps TERM so that when cancel() signals the whole group it outlives the
    command long enough to record 143; the subshell resets the trap, so the command itself
    gets the default TERM behaviour. A batch job's environment is in :data:`ENV_FILE`:
    the wrapper sources it and removes it before anything else, so the values are on disk
    only while the job waits in the queue.
    """
    return "\n".join([
        "# Detached job wrapper written by the harness (pipeline/hosts/jobscripts.py).",
        f"if [ -f {ENV_FILE} ]; then . ./{ENV_FILE}; rm -f {ENV_FILE}; fi",
        "if read -r st 2>/dev/null < /proc/$$/stat; then",
        "  r=${st##*) }",
        "  set -- $r",
        "  printf '%s\\n' \"${20}\" > pid_start",
        "fi",
        "printf '%s\\n' \"$$\" > pid.tmp && mv -f pid.tmp pid",
        "trap : TERM INT HUP",
        f"( cd {q(cwd)} && exec {shlex.join(argv)} )",
        "code=$?",
        "printf '%s\\n' \"$code\" > exit_code.tmp && mv -f exit_code.tmp exit_code",
        "",
    ])


def launch_script(run_dir: str, wrapper: str, description: str,
                  wait_s: float = 10.0) -> str:
    """Start the job unless this run dir already has one; print ``launched|attached PID``.

    The job inherits the launching shell's environment, which the executor sets
    (:meth:`pipeline.hosts.executor.Executor._shell_env`: over SSH the values arrive on the
    shell's standard input, on this machine in its environment): they reach the job without
    being in any argv or written to any file on the host.
    """
    tries = max(1, int(wait_s / 0.05))
    return (
        f"mkdir -p {q(run_dir)} && cd {q(run_dir)} || exit 1\n"
        "if ( set -C; : > started ) 2>/dev/null; then\n"
        f"  printf '%s\\n' {q(description)} > cmd\n"
        f"  printf '%s' {q(wrapper)} > job.sh\n"
        "  setsid nohup sh ./job.sh < /dev/null > log 2>&1 &\n"
        "  how=launched\n"
        "else\n"
        "  how=attached\n"
        "fi\n"
        "i=0\n"
        f"while [ ! -s pid ] && [ ! -f exit_code ] && [ $i -lt {tries} ]; do\n"
        "  sleep 0.05; i=$((i+1))\n"
        "done\n"
        'echo "$how $(cat pid 2>/dev/null)"\n'
    )


def poll_script(run_dir: str) -> str:
    """Print ``STATE CODE PID CANCELLED`` (``-`` for none); ``missing`` when there is no job."""
    return (
        f"cd {q(run_dir)} 2>/dev/null && [ -f started ] || {{ echo missing; exit 0; }}\n"
        f"{_FUNCTIONS}"
        "c=-; [ -f cancelled ] && c=cancelled\n"
        "p=$(cat pid 2>/dev/null); p=${p:--}\n"
        "if [ -f exit_code ]; then echo \"exit $(cat exit_code) $p $c\"\n"
        "elif alive; then echo \"running - $p $c\"\n"
        # the job may have finished between the two tests above
        "elif [ -f exit_code ]; then echo \"exit $(cat exit_code) $p $c\"\n"
        "else echo \"lost - $p $c\"\n"
        "fi\n"
    )


def cancel_script(run_dir: str, grace_s: float) -> str:
    """TERM the job's process group, wait up to ``grace_s`` for it to go, then KILL it."""
    tries = max(1, int(grace_s / 0.1))
    return (
        f"cd {q(run_dir)} 2>/dev/null && [ -f started ] || {{ echo missing; exit 0; }}\n"
        f"{_FUNCTIONS}"
        ": > cancelled\n"
        "if [ -f exit_code ] || [ ! -s pid ]; then echo finished; exit 0; fi\n"
        # a live leader with another start time is not ours: the group has been gone long
        "if reused || ! group_alive; then echo gone; exit 0; fi\n"
        "g=$(cat pid)\n"
        'kill -TERM -"$g" 2>/dev/null\n'
        "i=0\n"
        f"while group_alive && [ $i -lt {tries} ]; do sleep 0.1; i=$((i+1)); done\n"
        'if group_alive; then kill -KILL -"$g" 2>/dev/null; echo killed; else echo terminated; fi\n'
    )
