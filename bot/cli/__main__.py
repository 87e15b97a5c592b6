"""``python -m bot.cli``: the same as the ``attune`` command."""

import sys

from bot.cli import main

sys.exit(main())
