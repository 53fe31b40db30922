def get_data_loader_distributed(params, location, distributed, train):
    if params.data_loader_config.startswith("dali"):
        # upstream: from .data_loader_dali import get_data_loader (NVIDIA DALI; not in this copy)
        raise NotImplementedError("data_loader_config 'dali' needs utils/data_loader_dali.py (NOTES.md)")
    from .data_loader import get_data_loader
    return get_data_loader(params, location, distributed, train)
