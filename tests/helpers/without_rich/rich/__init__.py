"""Not rich: on the PYTHONPATH of the processes the tests start (tests/helpers/cli.py),
importing ``rich`` fails there as it does where rich is not installed."""

raise ImportError("rich is kept out of the processes the tests start (tests/helpers/cli.py)")
