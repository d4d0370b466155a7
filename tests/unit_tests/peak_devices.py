"""CUDA device names of the GPUs whose peak :data:`megatron.oellm.training.throughput.DEVICE_PEAKS` knows, as
``torch.cuda.get_device_name`` reports them: the throughput hook's tests and the bench's draw from them."""

KNOWN_DEVICES = ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA GH200 480GB", "NVIDIA H200",
                 "NVIDIA H200 NVL", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM-64GB")
