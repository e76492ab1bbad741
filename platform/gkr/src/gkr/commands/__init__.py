"""gkr's commands, one module each; each module's `command` is a click command.

gkr/cli.py names each command's module and imports it only when the command runs (or shows its
own help), so a command pays only for what it uses.
"""
