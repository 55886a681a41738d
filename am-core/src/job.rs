//! What a conduit provides to the launcher's job supervisor (the `amnet-launch` crate).
//!
//! The supervisor starts and watches the ranks; a conduit's job type says what each rank needs
//! in its environment, where the job-wide exit code is published and how to clean up. Ranks
//! never use this: it is implemented by the job types of the smp and udp conduits.

/// What a conduit's job provides to the supervisor.
pub trait JobBackend {
    /// Extra environment for `rank` (besides `AMNET_RANK`, `AMNET_SIZE`, `AMNET_CONDUIT`).
    fn rank_env(&self, rank: u32) -> Vec<(String, String)>;
    /// Secrets `rank` needs in its environment, as (name, value), the names of
    /// [`Kind::Secret`](crate::config::Kind::Secret) variables. They never appear on a command
    /// line: a rank started here gets them in its environment, a rank started elsewhere
    /// through the standard input of the remote-start command, from which a wrapper shell
    /// reads them into its environment (see [`JobBackend::remote_prefix`]). None by default.
    fn rank_secrets(&self, _rank: u32) -> Vec<(String, String)> {
        Vec::new()
    }
    /// The exit code published for the whole job, if any, with the rank that published it
    /// (`None` when the launcher did).
    fn exit_flag(&self) -> Option<(i32, Option<u32>)>;
    /// Publish an exit code so that the surviving ranks leave at their next poll.
    fn publish_exit(&self, code: i32);
    /// Remove everything the job created (shared memory, sockets...). Called once at the end.
    fn cleanup(&mut self);
    /// For a rank that runs elsewhere: the command that starts a program there (for example
    /// `["ssh", "host"]`). The supervisor then runs `PREFIX... env K=V... PROGRAM ARGS...`,
    /// passing the rank's variables and every `AMNET_*` variable of the launcher but the
    /// secret ones on the command line; with [`JobBackend::rank_secrets`] it runs
    /// `PREFIX... sh -c 'read -r NAME && export NAME && exec "$@"' amnet-rank env K=V...
    /// PROGRAM ARGS...` and writes each secret's value, one a line, to the command's standard
    /// input, which it then closes. `None` (the default) starts the rank here as a child
    /// process.
    fn remote_prefix(&self, _rank: u32) -> Option<Vec<String>> {
        None
    }
}
