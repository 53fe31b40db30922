import logging
import os

_format = '%(asctime)s - %(name)s - %(levelname)s - %(message)s'


def slurm_filter(record):
    # only rank 0 of a SLURM job logs (every record passes outside SLURM)
    return int(os.environ.get('SLURM_PROCID', '0')) == 0


def config_logger(log_level=logging.INFO):
    logging.basicConfig(format=_format, level=log_level)
    root_logger = logging.getLogger()
    root_logger.addFilter(slurm_filter)


def log_to_file(logger_name=None, log_level=logging.INFO, log_filename='tensorflow.log'):
    if not os.path.exists(os.path.dirname(log_filename)):
        os.makedirs(os.path.dirname(log_filename))

    log = logging.getLogger(logger_name) if logger_name is not None else logging.getLogger()

    fh = logging.FileHandler(log_filename)
    fh.setLevel(log_level)
    fh.setFormatter(logging.Formatter(_format))
    log.addHandler(fh)
