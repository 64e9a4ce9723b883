"""The workbench's own kernels and schedules: the packed conv emitter (fp32, depthwise, int8 VNNI), the default
schedule every untuned CPU kernel gets (packed convs and matmuls register-blocked), the VNNI dot-product
intrinsic, and the pass lists that lower a module with them."""
