import sys

from batchproof.cli import main

sys.exit(main())
