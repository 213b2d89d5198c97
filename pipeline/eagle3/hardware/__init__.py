"""Where the work runs: device placement, ranks of a distributed run, memory plans and quantized checkpoints."""
