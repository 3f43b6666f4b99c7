"""``python -m xmr COMMAND ...``, the same as the installed ``xmr`` command."""
from xmr.console import main

main()
