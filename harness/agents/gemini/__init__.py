"""Gemini CLI: its hooks, its compression notice and its todo tracker."""
