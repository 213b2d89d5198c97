"""Running on another machine over SSH: sending a command's environment, and moving files
with and without SFTP."""
