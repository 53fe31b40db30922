import argparse
import logging
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from utils import logging_utils
logging_utils.config_logger()
from utils.YParams import YParams
from utils.data_loader import get_data_loader
from models import build_model

DEFAULT_YAML = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'config', 'default.yaml')


class Trainer():
    def count_parameters(self):
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    def __init__(self, params, world_rank):
        self.params = params
        self.world_rank = world_rank
        if torch.cuda.is_available():
            self.device = torch.device('cuda:%d' % params.local_rank)
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device('cpu')

        logging.info('rank %d, begin data loader init' % world_rank)
        self.train_data_loader, self.train_dataset, self.train_sampler = get_data_loader(
            params, dist.is_initialized(), train=True)
        self.valid_data_loader, self.valid_dataset = get_data_loader(
            params, dist.is_initialized(), train=False)
        logging.info('rank %d, data loader initialized' % world_rank)

        self.model = build_model(params).to(self.device)
        if params.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)

        if dist.is_initialized():
            self.model = DistributedDataParallel(self.model, device_ids=[params.local_rank],
                                                 output_device=[params.local_rank])

        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=params.lr,
                                           weight_decay=params.weight_decay)

        self.amp_dtype = {'float16': torch.float16, 'bfloat16': torch.bfloat16}[params.amp_dtype]
        self.gscaler = torch.amp.GradScaler(self.device.type,
                                            enabled=(params.enable_amp and self.amp_dtype == torch.float16))

        if params.scheduler == 'cosine':
            self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=params.max_epochs)
        else:
            self.scheduler = None

        if params.loss == 'l2':
            self.loss_obj = nn.MSELoss()
        elif params.loss == 'l1':
            self.loss_obj = nn.L1Loss()
        else:
            raise ValueError('unknown loss %r' % params.loss)

        self.iters = 0
        self.startEpoch = 0
        if params.resuming:
            logging.info("Loading checkpoint %s" % params.checkpoint_path)
            self.restore_checkpoint(params.checkpoint_path)
        self.epoch = self.startEpoch

        if params.log_to_screen:
            logging.info(self.model)
            logging.info("Number of trainable model parameters: {}".format(self.count_parameters()))

    def train(self):
        if self.params.log_to_screen:
            logging.info("Starting Training Loop...")

        best_valid_loss = 1.e6
        for epoch in range(self.startEpoch, self.params.max_epochs):
            if dist.is_initialized():
                self.train_sampler.set_epoch(epoch)

            start = time.time()
            tr_time, data_time, train_logs = self.train_one_epoch()
            valid_time, valid_logs = self.validate_one_epoch()

            if self.scheduler is not None:
                self.scheduler.step()

            if self.world_rank == 0 and self.params.save_checkpoint:
                # checkpoint at the end of every epoch
                self.save_checkpoint(self.params.checkpoint_path)
                if valid_logs['valid_loss'] <= best_valid_loss:
                    self.save_checkpoint(self.params.best_checkpoint_path)
                    best_valid_loss = valid_logs['valid_loss']

            if self.params.log_to_screen:
                logging.info('Time taken for epoch {} is {} sec'.format(epoch + 1, time.time() - start))
                logging.info('Train time {:.2f} s, data time {:.2f} s, valid time {:.2f} s'.format(
                    tr_time, data_time, valid_time))
                logging.info('Train loss: {}. Valid loss: {}. Valid L1: {}'.format(
                    train_logs['loss'], valid_logs['valid_loss'], valid_logs['valid_l1']))
                logging.info('lr: {}'.format(self.optimizer.param_groups[0]['lr']))

    def train_one_epoch(self):
        self.epoch += 1
        tr_time = 0
        data_time = 0
        tr_loss = 0.
        n_batches = 0
        self.model.train()

        data_start = time.time()
        for i, (inp, tar) in enumerate(self.train_data_loader, 0):
            self.iters += 1
            inp, tar = inp.to(self.device), tar.to(self.device)
            if self.params.channels_last:
                inp = inp.to(memory_format=torch.channels_last)
                tar = tar.to(memory_format=torch.channels_last)
            data_time += time.time() - data_start

            tr_start = time.time()
            self.model.zero_grad()
            if self.params.enable_amp:
                with torch.autocast(device_type=self.device.type, dtype=self.amp_dtype):
                    gen = self.model(inp)
                    loss = self.loss_obj(gen, tar)
                self.gscaler.scale(loss).backward()
                self.gscaler.step(self.optimizer)
                self.gscaler.update()
            else:
                gen = self.model(inp)
                loss = self.loss_obj(gen, tar)
                loss.backward()
                self.optimizer.step()

            tr_loss += loss.item()
            n_batches += 1
            tr_time += time.time() - tr_start

            if self.params.log_to_screen and (i + 1) % 20 == 0:
                logging.info('  epoch %d iter %d/%d loss %.5f' % (self.epoch, i + 1,
                                                                   len(self.train_data_loader), loss.item()))
            data_start = time.time()

        logs = {'loss': torch.tensor(tr_loss / max(n_batches, 1), device=self.device)}
        if dist.is_initialized():
            for key in sorted(logs.keys()):
                dist.all_reduce(logs[key].detach())
                logs[key] = float(logs[key] / dist.get_world_size())
        logs = {k: float(v) for k, v in logs.items()}

        return tr_time, data_time, logs

    def validate_one_epoch(self):
        self.model.eval()

        valid_start = time.time()
        valid_buff = torch.zeros((3), dtype=torch.float32, device=self.device)
        valid_loss = valid_buff[0].view(-1)
        valid_l1 = valid_buff[1].view(-1)
        valid_steps = valid_buff[2].view(-1)

        with torch.no_grad():
            for i, (inp, tar) in enumerate(self.valid_data_loader, 0):
                inp, tar = inp.to(self.device), tar.to(self.device)
                if self.params.channels_last:
                    inp = inp.to(memory_format=torch.channels_last)
                with torch.autocast(device_type=self.device.type, dtype=self.amp_dtype,
                                    enabled=self.params.enable_amp):
                    gen = self.model(inp)
                gen = gen.float()
                valid_loss += self.loss_obj(gen, tar)
                valid_l1 += nn.functional.l1_loss(gen, tar)
                valid_steps += 1.

        if dist.is_initialized():
            dist.all_reduce(valid_buff)

        valid_buff[0:2] = valid_buff[0:2] / valid_buff[2]
        valid_buff_cpu = valid_buff.detach().cpu().numpy()
        logs = {'valid_loss': float(valid_buff_cpu[0]), 'valid_l1': float(valid_buff_cpu[1])}

        self.model.train()
        return time.time() - valid_start, logs

    def save_checkpoint(self, checkpoint_path, model=None):
        """ We intentionally require a checkpoint_dir to be passed
            in order to allow Ray Tune to use this function """
        if not model:
            model = self.model
        state = model.module.state_dict() if isinstance(model, DistributedDataParallel) else model.state_dict()
        torch.save({'iters': self.iters, 'epoch': self.epoch, 'model_state': state,
                    'optimizer_state_dict': self.optimizer.state_dict(),
                    'scheduler_state_dict': self.scheduler.state_dict() if self.scheduler else None},
                   checkpoint_path)

    def restore_checkpoint(self, checkpoint_path):
        checkpoint = torch.load(checkpoint_path, map_location=self.device)
        model = self.model.module if isinstance(self.model, DistributedDataParallel) else self.model
        model.load_state_dict(checkpoint['model_state'])
        self.iters = checkpoint['iters']
        self.startEpoch = checkpoint['epoch']
        self.optimizer.load_state_dict(checkpoint['optimizer_state_dict'])
        if self.scheduler is not None and checkpoint.get('scheduler_state_dict') is not None:
            self.scheduler.load_state_dict(checkpoint['scheduler_state_dict'])


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument("--run_num", default='00', type=str)
    parser.add_argument("--yaml_config", default=DEFAULT_YAML, type=str)
    parser.add_argument("--config", default='default', type=str)
    args = parser.parse_args()

    params = YParams(os.path.abspath(args.yaml_config), args.config)

    params['world_size'] = 1
    if 'WORLD_SIZE' in os.environ:
        params['world_size'] = int(os.environ['WORLD_SIZE'])

    world_rank = 0
    local_rank = 0
    if params['world_size'] > 1:
        dist.init_process_group(backend='nccl', init_method='env://')
        local_rank = int(os.environ["LOCAL_RANK"])
        world_rank = dist.get_rank()
        # batch_size in the yaml is the global batch
        params['global_batch_size'] = params.batch_size
        params['batch_size'] = int(params.batch_size // params['world_size'])

    params['local_rank'] = local_rank
    torch.manual_seed(world_rank)
    np.random.seed(world_rank)
    torch.backends.cudnn.benchmark = True

    # Set up directory
    expDir = os.path.join(os.path.abspath(params.exp_dir), args.config, str(args.run_num))
    if world_rank == 0:
        if not os.path.isdir(expDir):
            os.makedirs(expDir)
            os.makedirs(os.path.join(expDir, 'training_checkpoints/'))

    params['experiment_dir'] = os.path.abspath(expDir)
    params['checkpoint_path'] = os.path.join(expDir, 'training_checkpoints/ckpt.tar')
    params['best_checkpoint_path'] = os.path.join(expDir, 'training_checkpoints/best_ckpt.tar')

    # Do not resume unless asked to and a checkpoint is there
    params['resuming'] = bool(params.resuming) and os.path.isfile(params.checkpoint_path)

    if world_rank == 0:
        if params.log_to_file:
            logging_utils.log_to_file(logger_name=None, log_filename=os.path.join(expDir, 'out.log'))
        logging_utils.log_versions()
        params.log()

    params['log_to_screen'] = (world_rank == 0) and params['log_to_screen']

    trainer = Trainer(params, world_rank)
    trainer.train()
    logging.info('DONE ---- rank %d' % world_rank)
