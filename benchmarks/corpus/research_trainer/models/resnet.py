"""A residual encoder-decoder for field-to-field regression: a strided stem, a stack of
pre-activation residual blocks at reduced resolution, and a learned upsampling back to the
input grid, with a global skip from input to output."""
import torch
import torch.nn as nn


class ResBlock(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(ch)
        self.conv1 = nn.Conv2d(ch, ch, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(ch)
        self.conv2 = nn.Conv2d(ch, ch, kernel_size=3, padding=1, bias=False)
        self.act = nn.GELU()

    def forward(self, x):
        out = self.conv1(self.act(self.bn1(x)))
        out = self.conv2(self.act(self.bn2(out)))
        return x + out


class Down(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel_size=3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Up(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(cin, cout, kernel_size=4, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = nn.GELU()

    def forward(self, x, skip):
        return self.act(self.bn(self.deconv(x))) + skip


class ResidualNet(nn.Module):
    def __init__(self, in_channels=3, out_channels=3, width=64, n_blocks=8, n_down=2):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, width, kernel_size=3, padding=1, bias=False),
                                  nn.BatchNorm2d(width), nn.GELU())
        chans = [width * min(2 ** i, 4) for i in range(n_down + 1)]
        self.downs = nn.ModuleList([Down(chans[i], chans[i + 1]) for i in range(n_down)])
        self.blocks = nn.Sequential(*[ResBlock(chans[-1]) for _ in range(n_blocks)])
        self.ups = nn.ModuleList([Up(chans[i + 1], chans[i]) for i in reversed(range(n_down))])
        self.head = nn.Conv2d(width, out_channels, kernel_size=1)

        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        # start the head near zero so the network begins as the identity map
        nn.init.normal_(self.head.weight, std=1e-3)
        nn.init.zeros_(self.head.bias)

    def forward(self, x):
        h = self.stem(x)
        skips = [h]
        for down in self.downs:
            h = down(h)
            skips.append(h)
        h = self.blocks(h)
        skips.pop()
        for up in self.ups:
            h = up(h, skips.pop())
        return x + self.head(h)
