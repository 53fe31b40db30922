"""A stand-in for wandb where it is not installed (the GPU machine has no internet and no
wandb): what the wild corpus's scripts call, doing nothing, as wandb's own WANDB_MODE=disabled
does. benchmarks/wild.py puts this folder on PYTHONPATH only where `import wandb` would fail."""


class _Config(dict):
    def update(self, *a, **k):  # wandb.config.update(dict, allow_val_change=...)
        if a and isinstance(a[0], dict):
            super().update(a[0])

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(name) from exc


class _Run:
    def __init__(self):
        self.config = _Config()
        self.name = self.id = "disabled"

    def log(self, *a, **k):
        pass

    def watch(self, *a, **k):
        pass

    def finish(self, *a, **k):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


run = None
config = _Config()


def init(*a, **k):
    global run
    run = _Run()
    run.config.update(k.get("config") or {})
    return run


def log(*a, **k):
    pass


def watch(*a, **k):
    pass


def finish(*a, **k):
    pass


class _Media:
    def __init__(self, *a, **k):
        pass


Image = Histogram = Table = Video = Audio = _Media
