//! What a conduit provides to the launcher's job supervisor (the `amnet-launch` crate).
//!
//! The supervisor starts and watches the ranks; a conduit's job type says what each rank needs
//! in its environment, where the job-wide exit code is published and how to clean up. Ranks
//! never use this: it is implemented by the job types of the smp and udp conduits.

/// What a conduit's job provides to the supervisor.
pub trait JobBackend {
    /// Extra environment for `rank` (besides `AMNET_RANK`, `AMNET_SIZE`, `AMNET_CONDUIT`).
    fn rank_env(&self, rank: u32) -> Vec<(String, String)>;
    /// The exit code published for the whole job, if any, with the rank that published it
    /// (`None` when the launcher did).
    fn exit_flag(&self) -> Option<(i32, Option<u32>)>;
    /// Publish an exit code so that the surviving ranks leave at their next poll.
    fn publish_exit(&self, code: i32);
    /// Remove everything the job created (shared memory, sockets...). Called once at the end.
    fn cleanup(&mut self);
    /// For a rank that runs elsewhere: the command that starts a program there (for example
    /// `["ssh", "host"]`). The supervisor then runs `PREFIX... env K=V... PROGRAM ARGS...`,
    /// passing the rank's variables and every `AMNET_*` variable of the launcher on the
    /// command line. `None` (the default) starts the rank here as a child process.
    fn remote_prefix(&self, _rank: u32) -> Option<Vec<String>> {
        None
    }
}
