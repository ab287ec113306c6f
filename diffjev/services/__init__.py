"""Services: the operations the command line and the studio share. Each opens its own units of work
on a Database; neither caller writes SQL."""
