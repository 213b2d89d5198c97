"""Planning a campaign before it runs: its stages' sizes and the disk they will take."""
