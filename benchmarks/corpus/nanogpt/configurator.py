"""
Poor man's configurator, in the nanoGPT manner. Not a module: train.py runs it with exec(), so it
overrides train.py's globals in place.

    python train.py config/override_file.py --batch_size=32

runs config/override_file.py first (a plain python file of assignments), then sets batch_size.
Each --key=value must name a global that train.py already has, and the value must keep its type.
"""
import os
import sys
from ast import literal_eval

for arg in sys.argv[1:]:
    if '=' not in arg:
        # a config file
        assert not arg.startswith('--'), f"expected --key=value or a config file, got {arg}"
        config_file = arg
        if not os.path.exists(config_file):
            # this corpus copy also finds config/... next to train.py, so it runs from any directory
            config_file = os.path.join(os.path.dirname(os.path.abspath(__file__)), arg)
        print(f"Overriding config with {config_file}:")
        with open(config_file) as f:
            print(f.read())
        exec(open(config_file).read())
    else:
        # --key=value
        assert arg.startswith('--'), f"expected --key=value, got {arg}"
        key, val = arg.split('=', 1)
        key = key[2:]
        if key not in globals():
            raise ValueError(f"Unknown config key: {key}")
        try:
            # numbers, booleans, ...
            attempt = literal_eval(val)
        except (SyntaxError, ValueError):
            # a bare string
            attempt = val
        if type(attempt) != type(globals()[key]):
            if isinstance(globals()[key], float) and isinstance(attempt, int):
                attempt = float(attempt)
            else:
                raise TypeError(f"--{key}: expected {type(globals()[key]).__name__}, got {val!r}")
        print(f"Overriding: {key} = {attempt}")
        globals()[key] = attempt
