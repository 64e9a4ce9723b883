"""Process-wide runtime facts every room may read: the thread count kernels run on, reaching an RPC tracker."""
