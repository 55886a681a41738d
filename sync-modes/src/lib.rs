//! UPC-style IN/OUT synchronization modes for amnet collectives (filled in by the collectives work).
