"""Screens: the live board, replay, and the prompt and help dialogs."""
