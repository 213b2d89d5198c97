"""The served benchmark's parts: prompts, load levels, trials, results, tables and reports."""
