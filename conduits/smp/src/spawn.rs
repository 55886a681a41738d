//! An smp job as the launcher sees it: the job's control block, created before the ranks start,
//! the environment that tells each rank which job it joins, and the removal of every
//! shared-memory object of the job at the end. The launcher (`amnet-launch`) starts the ranks.

use amnet_core::job::JobBackend;
use amnet_core::Result;

use crate::conduit::{create_ctl, ctl_exit, ctl_request_exit, new_job_name};
use crate::shm::{unlink_prefix, Region};

/// A process-mode smp job on this host.
#[derive(Debug)]
pub struct SmpJob {
    name: String,
    ranks: u32,
    ctl: Option<Region>,
}

impl SmpJob {
    /// Create the job's control block, after removing what jobs whose launcher was killed
    /// left in /dev/shm.
    pub fn new(ranks: u32) -> Result<SmpJob> {
        crate::shm::sweep_stale();
        let name = new_job_name();
        let ctl = create_ctl(&name, ranks)?;
        Ok(SmpJob {
            name,
            ranks,
            ctl: Some(ctl),
        })
    }
}

impl JobBackend for SmpJob {
    fn rank_env(&self, _rank: u32) -> Vec<(String, String)> {
        vec![("AMNET_SMP_JOB".into(), self.name.clone())]
    }
    fn exit_flag(&self) -> Option<(i32, Option<u32>)> {
        self.ctl.as_ref().and_then(|c| ctl_exit(c, self.ranks))
    }
    fn publish_exit(&self, code: i32) {
        if let Some(c) = &self.ctl {
            ctl_request_exit(c, self.ranks, code);
        }
    }
    fn cleanup(&mut self) {
        // The control object is `/{name}-ctl`: the prefix covers it.
        unlink_prefix(&format!("{}-", self.name));
        self.ctl = None;
    }
}

impl Drop for SmpJob {
    fn drop(&mut self) {
        if self.ctl.is_some() {
            self.cleanup();
        }
    }
}
