# a small character-level model on the (here: synthetic) shakespeare_char dataset;
# good for one GPU in a few minutes

out_dir = 'out-shakespeare-char'
eval_interval = 250  # small model, overfits quickly: look at val often
eval_iters = 200
log_interval = 10

# only keep a checkpoint when val improves
always_save_checkpoint = False

wandb_log = False
wandb_project = 'shakespeare-char'
wandb_run_name = 'mini-gpt'

dataset = 'shakespeare_char'
gradient_accumulation_steps = 1
batch_size = 64
block_size = 256  # characters of context

# a baby GPT
n_layer = 6
n_head = 6
n_embd = 384
dropout = 0.2

learning_rate = 1e-3  # a tiny model can take a larger lr
max_iters = 5000
lr_decay_iters = 5000  # usually = max_iters
min_lr = 1e-4  # usually learning_rate / 10
beta2 = 0.99  # more tokens per iter than usual, so a little larger

warmup_iters = 100
