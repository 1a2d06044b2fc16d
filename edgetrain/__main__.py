"""Entry point for ``python -m edgetrain``."""

from edgetrain.cli.app import main

if __name__ == "__main__":
    main()
