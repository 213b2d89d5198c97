"""The runner end to end: real local, SSH and Slurm jobs, resumes and retries, stage time
limits, a stage bound to its todo, and masked job logs."""
