"""Our kernels and layers with their naive references (a kernel's reference sits beside it): the gated delta rule's
float64 recurrence, cross entropy, RMSNorm, MoE token permutation and the fp32 products."""
