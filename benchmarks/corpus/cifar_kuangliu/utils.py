'''Small helpers for the CIFAR training script:
    - get_mean_and_std: per-channel mean and std of a dataset.
    - init_params: Kaiming / constant initialisation of a network.
    - progress_bar: one-line console progress bar in the style of xlua.progress.
'''
import os
import shutil
import sys
import time

import torch
import torch.nn as nn
import torch.nn.init as init


def get_mean_and_std(dataset):
    '''Per-channel mean and std of the images in dataset.'''
    dataloader = torch.utils.data.DataLoader(dataset, batch_size=1, shuffle=True, num_workers=2)
    mean = torch.zeros(3)
    std = torch.zeros(3)
    print('==> Computing mean and std..')
    for inputs, targets in dataloader:
        for c in range(3):
            mean[c] += inputs[:, c, :, :].mean()
            std[c] += inputs[:, c, :, :].std()
    mean.div_(len(dataset))
    std.div_(len(dataset))
    return mean, std


def init_params(net):
    '''Initialise conv, batch-norm and linear layers.'''
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            init.kaiming_normal_(m.weight, mode='fan_out')
            if m.bias is not None:
                init.constant_(m.bias, 0)
        elif isinstance(m, nn.BatchNorm2d):
            init.constant_(m.weight, 1)
            init.constant_(m.bias, 0)
        elif isinstance(m, nn.Linear):
            init.normal_(m.weight, std=1e-3)
            if m.bias is not None:
                init.constant_(m.bias, 0)


def _terminal_width():
    # `stty size` only answers on a terminal; fall back to 80 columns when the
    # output goes to a pipe or a file.
    try:
        rows, cols = os.popen('stty size 2>/dev/null', 'r').read().split()
        return int(cols)
    except ValueError:
        return shutil.get_terminal_size((80, 24)).columns


term_width = _terminal_width()

TOTAL_BAR_LENGTH = 65.
last_time = time.time()
begin_time = last_time


def progress_bar(current, total, msg=None):
    global last_time, begin_time
    if current == 0:
        begin_time = time.time()  # a new bar starts

    done = int(TOTAL_BAR_LENGTH * current / total)
    left = int(TOTAL_BAR_LENGTH - done) - 1
    sys.stdout.write(' [' + '=' * done + '>' + '.' * left + ']')

    now = time.time()
    step_time = now - last_time
    last_time = now
    tot_time = now - begin_time

    parts = ['  Step: %s' % format_time(step_time),
             ' | Tot: %s' % format_time(tot_time)]
    if msg:
        parts.append(' | ' + msg)
    msg = ''.join(parts)
    sys.stdout.write(msg)
    sys.stdout.write(' ' * max(0, term_width - int(TOTAL_BAR_LENGTH) - len(msg) - 3))

    # back up to the middle of the bar and print the counter there
    sys.stdout.write('\b' * max(0, term_width - int(TOTAL_BAR_LENGTH / 2) + 2))
    sys.stdout.write(' %d/%d ' % (current + 1, total))

    sys.stdout.write('\r' if current < total - 1 else '\n')
    sys.stdout.flush()


def format_time(seconds):
    '''The two largest units of a duration: 1h5m, 3s250ms, 12ms.'''
    units = []
    days, seconds = divmod(seconds, 86400)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    whole = int(seconds)
    millis = int((seconds - whole) * 1000)
    for value, suffix in ((int(days), 'D'), (int(hours), 'h'), (int(minutes), 'm'),
                          (whole, 's'), (millis, 'ms')):
        if value > 0 and len(units) < 2:
            units.append('%d%s' % (value, suffix))
    return ''.join(units) or '0ms'
