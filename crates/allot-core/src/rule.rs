//! Policy rules and reasons. Every decision names the rule that produced
//! it; rule ids are documented in `docs/rules.md`. A leaf: it depends on
//! nothing else in the crate.

use std::borrow::Cow;
use std::fmt;

macro_rules! rules {
    ($($variant:ident => $id:literal, $title:literal;)*) => {
        /// A policy rule, identified as in `docs/rules.md`.
        #[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
        pub enum Rule { $($variant),* }

        impl Rule {
            pub const ALL: &'static [Rule] = &[$(Rule::$variant),*];

            /// The rule id, e.g. `FS-1`.
            pub fn id(self) -> &'static str {
                match self { $(Rule::$variant => $id),* }
            }

            /// One-line statement of the rule.
            pub fn title(self) -> &'static str {
                match self { $(Rule::$variant => $title),* }
            }
        }
    };
}

rules! {
    PlaceGang => "PLACE-1", "gang: all GPUs of a workload are allocated at once or none are";
    PlaceNodes => "PLACE-2", "nodes = k means exactly k nodes with gpus/k GPUs each; one pool per workload";
    PlaceRack => "PLACE-3", "multi-node workloads are placed inside one rack when possible";
    PlaceBestFit => "PLACE-4", "best fit: the fullest nodes that fit are used first, keeping whole nodes free";
    PlaceGpuType => "PLACE-5", "a GPU-type constraint is honoured";
    PlaceHealthy => "PLACE-6", "unhealthy, draining or drained nodes get no new work";
    PlaceSpread => "PLACE-7", "on a spread pool, a nodes = 0 workload that fits no single node takes GPUs from several nodes";
    FleetEligible => "FLEET-1", "a workload runs only on the clusters it names (default: any cluster that can run its shape and GPU type); a gang never spans clusters";
    FleetPlace => "FLEET-2", "among eligible clusters: the best fit now, then the cluster with the most free GPUs of the pool's type, then config order";
    FleetOutage => "FLEET-3", "a cluster whose executor cannot be reached for the outage threshold is taken out of service as a whole: each of its nodes fails (MNT-2) and its workloads are requeued";
    FleetReturn => "FLEET-4", "a cluster that answers again returns to service only after its jobs of Allot's store that still run are stopped; none is adopted";
    FifoOrder => "FIFO-1", "strict FIFO: start in submit order, stop at the first workload that does not fit";
    FifoBackfill => "FIFO-2", "FIFO with backfill: later workloads start when they fit";
    PrioOrder => "PRIO-1", "strict priority (urgent > high > normal > low), FIFO within a level";
    PrioPools => "PRIO-2", "a team's work runs only on its legacy pools plus shared pools";
    PrioPreempt => "PRIO-3", "only preemptible workloads are preempted, only by strictly higher priority";
    SlurmPriority => "SLURM-1", "slurm: job priority is Slurm's multifactor sum of weighted age, fair-share, job-size, partition, QOS and GPU TRES factors, each normalised to 0..1, computed when a workload is queued and every `PriorityCalcPeriod`";
    SlurmFairTree => "SLURM-2", "slurm: the fair-share factor ranks users by Fair Tree: level fair share (shares over decayed usage) among siblings, depth first, recomputed every `PriorityCalcPeriod`";
    SlurmMain => "SLURM-3", "slurm: the main scheduler starts work in priority order and stops a partition at its first workload that does not fit";
    SlurmBackfill => "SLURM-4", "slurm: every bf_interval, backfill reserves GPUs for waiting work by time limits and starts later work only if it delays no reservation";
    SlurmPreempt => "SLURM-5", "slurm: with preempt = qos, a waiting workload preempts and requeues preemptible running work of a lower priority label";
    BudgetFirst => "BUD-1", "in-budget work ranks ahead of all over-budget work";
    BudgetOver => "BUD-2", "over-budget work runs only on capacity no in-budget work can use, without a slice";
    BudgetLedger => "BUD-3", "usage is charged per second of GPU allocation, normalised by GPU type";
    BudgetPeriods => "BUD-4", "budgets renew at each period boundary: fixed periods from an anchor instant, or calendar months";
    BudgetCarryOver => "BUD-5", "unused budget of a period is carried into the next, up to the configured fraction of its budget";
    BudgetUser => "BUD-6", "a user who has used their own budget in an account is over budget for that account's work, as BUD-1 and BUD-2 treat an account over budget; the account's budget still applies";
    ShareDefault => "FS-0", "share defaults to the budget when all unset siblings have one, else 1";
    FairShare => "FS-1", "hierarchical fair share: lowest (decayed usage + allocation) / entitlement first, level by level";
    FairUsers => "FS-2", "within a project: users by the same measure over their user share (default 1), then FIFO";
    ImpactIdle => "IMP-1", "over-budget work gets idle capacity by impact, highest first, then by fair share, level by level";
    ImpactVictim => "IMP-2", "among victims of equal standing (budget, fair share), the lower impact yields first";
    ImpactWeight => "IMP-3", "with impact_weighting = on, FS-1 entitlement among siblings is proportional to share x impact";
    ImpactBudget => "IMP-4", "impact never lifts work across a budget tier: BUD-1 and BUD-2 come first";
    Slice => "CON-1", "a started workload runs at least min_slice before policy preemption";
    Grace => "CON-2", "preemption signals the workload and stops it after grace";
    Requeue => "CON-3", "a stopped workload loses progress since its last checkpoint and is requeued";
    NoPingPong => "CON-4", "preempt only if the preemptor ranks strictly better than the victim after the swap";
    VictimOrder => "CON-5", "victims: over budget, furthest above fair share, least unsaved progress, fewest extra GPUs";
    TimeLimit => "CON-6", "a workload that has run its time limit in one attempt is signalled, stopped after grace and ends as failed (not requeued)";
    CheckpointReport => "CON-7", "a workload that reports checkpoints loses, when stopped, only the progress since its last reported checkpoint; CON-5 counts the same";
    CheckpointOnSignal => "CON-8", "a workload that checkpoints when signalled counts as losing nothing for CON-5; a checkpoint it reports in the grace keeps all its progress";
    IdleReclaim => "CON-9", "a workload whose GPUs stay below its class's idle threshold is warned, then stopped after grace and ended (not requeued)";
    SwapMargin => "CON-11", "with swap_margin = m > 0, CON-4 also needs the preemptor's side after the swap below (1 - m) x the victim's: ranks closer than that do not trade GPUs";
    ClaimKept => "CON-10", "with keep_claims = on, the GPUs a waiting workload preempted or claimed are kept for it until it starts: no other work starts on or claims them";
    CheckpointWait => "CON-12", "with checkpoint_wait = W > 0, a fair-share swap (CON-4) whose victims include one with its next checkpoint due within W, and sooner than the progress it would lose, waits for that checkpoint";
    Interactive => "INT-1", "interactive workloads within the lane limits preempt batch work past its slice at once";
    InteractiveLimit => "INT-2", "interactive workloads over the lane limits are rejected";
    ServiceNoSlice => "SVC-1", "services are not time-sliced and are charged continuously";
    ServiceCap => "SVC-2", "an account's service GPUs are capped";
    Drain => "MNT-1", "a drain preempts the node's workloads under the contract, then takes it out of service";
    Failure => "MNT-2", "a node failure stops its workloads at once; they are requeued";
    LaunchFailure => "MNT-3", "a launch that fails outside the workload requeues it without spending a retry; 3 such failures in a row on a node drain it";
    LaunchSetup => "MNT-4", "a launch that fails because the workload's own setup is missing on its node (its working directory) ends it as failed at once: no retry spent, the node not blamed";
    NodeAdded => "MNT-5", "a node that appears joins its pool in service: capacity added";
    Completed => "ENG-1", "a workload that completed its work releases its GPUs";
    AccountLive => "ACC-1", "accounts are created, renamed and closed live; every account keeps its id, usage and history, new ones are appended";
    AccountClosed => "ACC-2", "a closed account (or one below it) takes no new work; its accepted work runs on under the contract";
    AccountStop => "ACC-3", "closing with stop cancels the account's pending work and stops its running work after grace (CON-2)";
    Reload => "CFG-1", "a config reload replaces the contract from its instant: admitted work keeps what admission gave it, decayed usage is brought to that instant under the old half-lives, and the budget periods change only at a restart";
    Hold => "HOLD-1", "a held workload waits, whatever the policy, until it is released; only a pending workload can be held";
    DepWait => "DEP-1", "a workload with dependencies waits until each is satisfied: afterok when the other finished, afternotok when it failed, was cancelled or rejected, afterany when it ended";
    DepNever => "DEP-2", "a workload whose dependency can no longer be satisfied is cancelled, and so in turn are the workloads waiting on it with afterok";
    Adopt => "K8S-10", "an attempt still running when the server restarts, on a cluster that holds the running state (Kubernetes), is adopted: it keeps its GPUs and its attempt number, charged from its recorded start; nothing is started twice";
    Outside => "K8S-11", "GPUs of a node held by pods Allot does not manage are neither free nor Allot's: no workload is placed on them until they are released";
    ArrayLimit => "ARR-1", "of an array with a limit of N, at most N elements are queued or hold GPUs at once; the others wait, lowest index first";
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl Rule {
    /// What the rule means for the person whose work it touches, in one
    /// plain sentence without numbers: the first words of a reason shown
    /// to people ([`Reason::lead`]).
    pub fn plain(self) -> &'static str {
        use Rule::*;
        match self {
            PlaceGang => "It waits until all the GPUs it asks for are free at once.",
            PlaceNodes => "It waits until the nodes it asks for have enough GPUs free.",
            PlaceRack => "It is being placed inside one rack.",
            PlaceBestFit => "It is placed on the fullest nodes that fit, to keep whole nodes free.",
            PlaceGpuType => "It waits for the GPU type it asks for.",
            PlaceHealthy => "The nodes it can run on are out of service.",
            PlaceSpread => "It is spread over several nodes.",
            FleetEligible => "It can run only on the clusters it names.",
            FleetPlace => "It goes to the cluster that fits it best.",
            FleetOutage => "Its cluster could not be reached and was taken out of service.",
            FleetReturn => "Its cluster is coming back into service.",
            FifoOrder => "Work submitted before it goes first.",
            FifoBackfill => "It starts as soon as it fits.",
            PrioOrder => "Work of a higher priority, or submitted before it, goes first.",
            PrioPools => "It can run only on its team's GPUs and the shared ones.",
            PrioPreempt => "Work of a higher priority took its GPUs.",
            SlurmPriority => "Jobs of a higher priority go first.",
            SlurmFairTree => "Users who have used less of their share recently go first.",
            SlurmMain => "A job of a higher priority is waiting for GPUs in its partition, and nothing passes it.",
            SlurmBackfill => "GPUs are reserved for it by the time limits of running jobs.",
            SlurmPreempt => "A job of a higher QOS took its GPUs.",
            BudgetFirst => {
                "Its account has used its GPU-time budget for this period, so work still in budget goes first."
            }
            BudgetOver => "Its account is over budget, so it runs only on GPUs no in-budget work can use.",
            BudgetLedger => "GPU time is charged per second of use.",
            BudgetPeriods => "Budgets renew at each period.",
            BudgetCarryOver => "Unused budget carries over into the next period.",
            BudgetUser => "Its user has used their own GPU-time budget in this account.",
            ShareDefault => "Its account's share comes from its budget.",
            FairShare => "Other projects have used less of their share recently, so their work goes first.",
            FairUsers => "Others in its project have used less recently, so their work goes first.",
            ImpactIdle => "Over-budget work gets idle GPUs by impact.",
            ImpactVictim => "Work of lower impact yields first.",
            ImpactWeight => "Shares are weighted by impact.",
            ImpactBudget => "Impact never lifts work over a budget.",
            Slice => "The GPUs are busy with work still inside its guaranteed time.",
            Grace => "It was asked to stop and has a grace period to save its work.",
            Requeue => "It was stopped and waits to run again from its last checkpoint.",
            NoPingPong => "It is next, but stopping running work for it would only swap places back later.",
            VictimOrder => "The work that loses least is stopped first.",
            TimeLimit => "It ran for its whole time limit.",
            CheckpointReport => "Stopped, it keeps the progress of its last reported checkpoint.",
            CheckpointOnSignal => "It saves its progress when asked to stop.",
            IdleReclaim => "Its GPUs stayed idle too long, so it was stopped.",
            ClaimKept => "GPUs being freed for it are kept for it until it starts.",
            SwapMargin => "Running work is stopped for it only when their shares differ by more than a margin.",
            CheckpointWait => {
                "Running work is stopped for it right after its next checkpoint, so none of that work is lost."
            }
            Interactive => "Interactive work gets GPUs first.",
            InteractiveLimit => "It asks for more than interactive work may have.",
            ServiceNoSlice => "Services run without time slices.",
            ServiceCap => "Its account already holds all the GPUs its services may use.",
            Drain => "Its node is being drained for maintenance.",
            Failure => "Its node failed.",
            LaunchFailure => "Its launch failed on the node, not in its own code; it is tried again.",
            LaunchSetup => "Its own setup (its working directory) is missing on its node.",
            NodeAdded => "A node was added.",
            Completed => "It finished its work.",
            AccountLive => "Accounts change live.",
            AccountClosed => "Its account is closed and takes no new work.",
            AccountStop => "Its account was closed and its work stopped.",
            Reload => "The scheduling contract was changed by a config reload.",
            Hold => "It is on hold until someone releases it.",
            DepWait => "It waits for the work it depends on.",
            DepNever => "The work it depends on can no longer end as it needs.",
            Adopt => "It kept running while the server restarted.",
            Outside => "Some GPUs are held by work Allot does not manage.",
            ArrayLimit => "Its array may run only so many elements at once.",
        }
    }
}

/// Why something happened (or did not): a rule and the numbers behind it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Reason {
    pub rule: Rule,
    /// Fixed texts are borrowed, so most reasons cost no allocation.
    pub detail: Cow<'static, str>,
    /// The plain sentence people read first, where the situation says
    /// more than the rule's own ([`Rule::plain`]).
    pub situation: Option<Cow<'static, str>>,
}

impl Reason {
    pub fn new(rule: Rule, detail: impl Into<Cow<'static, str>>) -> Reason {
        Reason { rule, detail: detail.into(), situation: None }
    }

    /// This reason, led for people by `sentence` instead of the rule's own.
    pub fn led_by(mut self, sentence: &'static str) -> Reason {
        self.situation = Some(Cow::Borrowed(sentence));
        self
    }

    /// The plain sentence people read first: why they wait, without numbers.
    pub fn lead(&self) -> &str {
        self.situation.as_deref().unwrap_or_else(|| self.rule.plain())
    }

    /// The reason as people read it: the plain sentence, then the rule id
    /// and its numbers.
    pub fn words(&self) -> String {
        format!("{} {self}", self.lead())
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.detail.is_empty() {
            write!(f, "{}: {}", self.rule.id(), self.rule.title())
        } else {
            write!(f, "{}: {}", self.rule.id(), self.detail)
        }
    }
}
