"""The zoo's names, descriptions, minimum input sides and parameter counts: plain data, no
torch, so ``edgetrain models list`` answers without building (or importing) anything.
:mod:`edgetrain.models.zoo` builds the models these rows describe; a test rebuilds every one
and checks :data:`LISTED_PARAMS` against it."""

from __future__ import annotations

from importlib import util

# Smallest input side (height and width, each) each torchvision architecture is built for;
# smaller inputs are resized up to it by a parameter-free ``nn.Upsample`` placed first.
# Found by trying every side from 1 up (forward in train mode with a batch of 2, in eval mode
# with a batch of 1, and ONNX export):
# - ResNets and MobileNetV2 run on any side (padded convolutions keep 1x1 maps alive), but they
#   downsample by 32: below 32 the last stages convolve padding only, so 32 is the floor.
# - VGG needs 32 (five unpadded 2x2 max-pools).
# - AlexNet needs 63 (11x11 stride-4 convolution and three 3x3 stride-2 max-pools).
# - SqueezeNet 1.1 needs 17 and GoogLeNet 15 (ceil-mode pools keep them alive below that
#   only down to those sides).
MIN_SIDE: dict[str, int] = {
    "resnet18": 32,
    "resnet50": 32,
    "resnet152": 32,
    "mobilenet_v2": 32,
    "vgg11": 32,
    "vgg16": 32,
    "vgg19": 32,
    "squeezenet1_1": 17,
    "alexnet": 63,
    "googlenet": 15,
}

DESCRIPTIONS: dict[str, str] = {
    "mlp": "multi-layer perceptron (options: hidden, dropout)",
    "lenet5": "LeNet-5, 2 conv + 3 FC (inputs below 28x28 resized up)",
    "cnn2": "DLion's 2 conv + 2 FC CNN (option: width)",
    "resnet18": "torchvision ResNet-18",
    "resnet50": "torchvision ResNet-50",
    "resnet152": "torchvision ResNet-152",
    "mobilenet_v2": "torchvision MobileNetV2",
    "vgg11": "torchvision VGG-11",
    "vgg16": "torchvision VGG-16",
    "vgg19": "torchvision VGG-19",
    "squeezenet1_1": "torchvision SqueezeNet 1.1",
    "alexnet": "torchvision AlexNet",
    "googlenet": "torchvision GoogLeNet (no auxiliary heads)",
}
MODEL_NAMES: tuple[str, ...] = tuple(DESCRIPTIONS)
# The models torchvision builds (the `vision` extra); the others need torch alone.
TORCHVISION_MODELS: frozenset[str] = frozenset(MIN_SIDE)
VISION_FIX = (
    "pip install 'edgetrain[vision]' (or scripts/setup with a torch spec that includes torchvision)"
)


def torchvision_installed() -> bool:
    """Whether torchvision can be imported here (found, not imported: that import is slow)."""
    return util.find_spec("torchvision") is not None


# The shape and classes `edgetrain models list` counts parameters at, and the counts:
# sum(p.numel()) of build_model(name, LISTED_INPUT, LISTED_CLASSES) (the model's defaults),
# as count_parameters gives them (tests/test_models.py checks every row).
LISTED_INPUT: tuple[int, int, int] = (3, 32, 32)
LISTED_CLASSES = 10
LISTED_PARAMS: dict[str, int] = {
    "mlp": 402_250,
    "lenet5": 83_126,
    "cnn2": 545_098,
    "resnet18": 11_181_642,
    "resnet50": 23_528_522,
    "resnet152": 58_164_298,
    "mobilenet_v2": 2_236_682,
    "vgg11": 128_807_306,
    "vgg16": 134_301_514,
    "vgg19": 139_611_210,
    "squeezenet1_1": 727_626,
    "alexnet": 57_044_810,
    "googlenet": 5_610_154,
}
