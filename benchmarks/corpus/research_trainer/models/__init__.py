from models.resnet import ResidualNet


def build_model(params):
    if params.model == 'resnet':
        return ResidualNet(in_channels=int(params.n_channels),
                           out_channels=int(params.n_channels),
                           width=int(params.width),
                           n_blocks=int(params.n_blocks),
                           n_down=int(params.n_down))
    raise ValueError("unknown model %r" % params.model)
