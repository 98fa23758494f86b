"""Prints, as JSON, its working directory and the variables named in argv[1:]."""

import json
import os
import sys

print(
    json.dumps({"cwd": os.getcwd(), "env": {name: os.environ.get(name) for name in sys.argv[1:]}})
)
