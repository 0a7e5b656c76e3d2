"""``python -m cuflash ...``: the same as the ``cuflash`` command (see ``cuflash.cli``)."""
import sys

from .cli import main

sys.exit(main())
