"""The launchers: replica groups as local processes or Ray actors, and the restart of a group that dies."""
