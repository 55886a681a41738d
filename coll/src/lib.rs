//! amnet collectives, teams and algorithm selection (filled in by the collectives work).
