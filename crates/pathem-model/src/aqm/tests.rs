//! The bottleneck against references written from the RFCs' pseudo-code.
