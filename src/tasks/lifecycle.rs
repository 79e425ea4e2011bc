//! The task state machine: the phases, the coarse status they imply, and which timestamps a
//! change sets. Pure logic; the store applies the [`Change`] it computes.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Fine-grained lifecycle phase (`taskStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Phase {
    Received,
    Planning,
    PlanningCompleted,
    ExecutingPlan,
    ExecutingReplan,
    SynthesizingAnswer,
    CompletedSuccess,
    FailedPlanning,
    FailedExecution,
    FailedSynthesis,
    FailedReplanningNoRecoveryPlan,
    FailedRecoveryExecution,
}

/// Coarse status (`status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Active,
    Paused,
    Completed,
    Failed,
    Cancelled,
}

impl Phase {
    pub const ALL: [Phase; 12] = [
        Phase::Received,
        Phase::Planning,
        Phase::PlanningCompleted,
        Phase::ExecutingPlan,
        Phase::ExecutingReplan,
        Phase::SynthesizingAnswer,
        Phase::CompletedSuccess,
        Phase::FailedPlanning,
        Phase::FailedExecution,
        Phase::FailedSynthesis,
        Phase::FailedReplanningNoRecoveryPlan,
        Phase::FailedRecoveryExecution,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Received => "RECEIVED",
            Phase::Planning => "PLANNING",
            Phase::PlanningCompleted => "PLANNING_COMPLETED",
            Phase::ExecutingPlan => "EXECUTING_PLAN",
            Phase::ExecutingReplan => "EXECUTING_REPLAN",
            Phase::SynthesizingAnswer => "SYNTHESIZING_ANSWER",
            Phase::CompletedSuccess => "COMPLETED_SUCCESS",
            Phase::FailedPlanning => "FAILED_PLANNING",
            Phase::FailedExecution => "FAILED_EXECUTION",
            Phase::FailedSynthesis => "FAILED_SYNTHESIS",
            Phase::FailedReplanningNoRecoveryPlan => "FAILED_REPLANNING_NO_RECOVERY_PLAN",
            Phase::FailedRecoveryExecution => "FAILED_RECOVERY_EXECUTION",
        }
    }

    pub fn parse(text: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.as_str() == text)
    }

    pub fn is_failure(self) -> bool {
        matches!(
            self,
            Phase::FailedPlanning
                | Phase::FailedExecution
                | Phase::FailedSynthesis
                | Phase::FailedReplanningNoRecoveryPlan
                | Phase::FailedRecoveryExecution
        )
    }

    pub fn is_terminal(self) -> bool {
        self == Phase::CompletedSuccess || self.is_failure()
    }

    /// Whether execution has begun (a failure from here is an execution failure).
    pub fn is_executing(self) -> bool {
        matches!(
            self,
            Phase::ExecutingPlan | Phase::ExecutingReplan | Phase::SynthesizingAnswer
        )
    }

    /// The phases this one may move to.
    pub fn next(self) -> &'static [Phase] {
        use Phase::*;
        match self {
            Received => &[Planning, PlanningCompleted, ExecutingPlan, FailedPlanning],
            Planning => &[PlanningCompleted, FailedPlanning],
            PlanningCompleted => &[Planning, ExecutingPlan, FailedPlanning],
            ExecutingPlan => &[
                ExecutingReplan,
                SynthesizingAnswer,
                CompletedSuccess,
                FailedExecution,
                FailedReplanningNoRecoveryPlan,
            ],
            ExecutingReplan => &[
                SynthesizingAnswer,
                CompletedSuccess,
                FailedRecoveryExecution,
                FailedReplanningNoRecoveryPlan,
            ],
            SynthesizingAnswer => &[CompletedSuccess, FailedSynthesis],
            CompletedSuccess
            | FailedPlanning
            | FailedExecution
            | FailedSynthesis
            | FailedReplanningNoRecoveryPlan
            | FailedRecoveryExecution => &[],
        }
    }

    /// The coarse status a task in this phase has (paused is kept by the caller).
    pub fn status(self) -> Status {
        if self == Phase::CompletedSuccess {
            Status::Completed
        } else if self.is_failure() {
            Status::Failed
        } else {
            Status::Active
        }
    }
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Paused => "paused",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    pub fn parse(text: &str) -> Option<Status> {
        [
            Status::Active,
            Status::Paused,
            Status::Completed,
            Status::Failed,
            Status::Cancelled,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }

    /// The statuses this one may move to.
    pub fn next(self) -> &'static [Status] {
        use Status::*;
        match self {
            Active => &[Paused, Completed, Failed, Cancelled],
            Paused => &[Active, Completed, Failed, Cancelled],
            Completed | Failed | Cancelled => &[],
        }
    }
}

/// Which of the timestamps a change sets (each only when still unset, except `completed`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stamps {
    pub plan_generated: bool,
    pub execution_started: bool,
    pub synthesis_started: bool,
    pub completed: bool,
}

/// The outcome of a requested change: the new phase and status and the timestamps to set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    pub phase: Phase,
    pub status: Status,
    pub stamps: Stamps,
}

/// An illegal move: what was asked, from where, and what would have been allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Illegal {
    pub field: &'static str,
    pub from: &'static str,
    pub to: &'static str,
    pub allowed: Vec<&'static str>,
}

impl Illegal {
    pub fn detail(&self) -> String {
        if self.allowed.is_empty() {
            format!(
                "cannot change {} from {} to {}: {} is final",
                self.field, self.from, self.to, self.from
            )
        } else {
            format!(
                "cannot change {} from {} to {}; allowed: {}",
                self.field,
                self.from,
                self.to,
                self.allowed.join(", ")
            )
        }
    }
}

fn stamps_for(phase: Phase) -> Stamps {
    Stamps {
        plan_generated: phase == Phase::PlanningCompleted,
        execution_started: phase.is_executing(),
        synthesis_started: phase == Phase::SynthesizingAnswer,
        completed: phase.is_terminal(),
    }
}

/// Applies a requested phase and/or status to a task in (`phase`, `status`).
///
/// A phase change must follow [`Phase::next`] and sets the coarse status it implies (a paused task
/// that changes phase is active again). A status change must follow [`Status::next`]; completing
/// or failing through the status moves the phase to `COMPLETED_SUCCESS` or to the failure fitting
/// the current phase, so the two never disagree. Asking for the current value is a no-op.
pub fn apply(
    phase: Phase,
    status: Status,
    want_phase: Option<Phase>,
    want_status: Option<Status>,
) -> Result<Change, Illegal> {
    let mut change = Change {
        phase,
        status,
        stamps: Stamps::default(),
    };
    if let Some(to) = want_phase.filter(|to| *to != phase) {
        if !phase.next().contains(&to) {
            return Err(Illegal {
                field: "phase",
                from: phase.as_str(),
                to: to.as_str(),
                allowed: phase.next().iter().map(|p| p.as_str()).collect(),
            });
        }
        if status.is_terminal() {
            return Err(Illegal {
                field: "phase",
                from: phase.as_str(),
                to: to.as_str(),
                allowed: Vec::new(),
            });
        }
        change.phase = to;
        change.status = to.status();
        change.stamps = stamps_for(to);
    }
    if let Some(to) = want_status.filter(|to| *to != change.status) {
        let from = change.status;
        if !from.next().contains(&to) {
            return Err(Illegal {
                field: "status",
                from: from.as_str(),
                to: to.as_str(),
                allowed: from.next().iter().map(|s| s.as_str()).collect(),
            });
        }
        change.status = to;
        match to {
            Status::Completed => {
                change.phase = Phase::CompletedSuccess;
                change.stamps.completed = true;
            }
            Status::Failed => {
                change.phase = failure_for(change.phase);
                change.stamps.completed = true;
            }
            Status::Cancelled => change.stamps.completed = true,
            Status::Active | Status::Paused => {}
        }
    }
    Ok(change)
}

/// The failure phase matching where a task was when it failed.
pub fn failure_for(phase: Phase) -> Phase {
    match phase {
        Phase::Received | Phase::Planning | Phase::PlanningCompleted => Phase::FailedPlanning,
        Phase::ExecutingReplan => Phase::FailedRecoveryExecution,
        Phase::SynthesizingAnswer => Phase::FailedSynthesis,
        Phase::ExecutingPlan => Phase::FailedExecution,
        terminal => terminal,
    }
}

/// The phase a task moves to when a plan version is added (`None`: unchanged), or an error when a
/// finished task is replanned.
pub fn on_plan(phase: Phase, status: Status) -> Result<Option<Phase>, Illegal> {
    if status.is_terminal() || phase.is_terminal() {
        return Err(Illegal {
            field: "plan",
            from: phase.as_str(),
            to: "a new plan version",
            allowed: Vec::new(),
        });
    }
    Ok(match phase {
        Phase::Received | Phase::Planning => Some(Phase::PlanningCompleted),
        Phase::ExecutingPlan => Some(Phase::ExecutingReplan),
        _ => None,
    })
}

/// The phase a task moves to when one of its items starts or finishes (execution has begun).
pub fn on_item_progress(phase: Phase) -> Option<Phase> {
    matches!(
        phase,
        Phase::Received | Phase::Planning | Phase::PlanningCompleted
    )
    .then_some(Phase::ExecutingPlan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for phase in Phase::ALL {
            assert_eq!(Phase::parse(phase.as_str()), Some(phase));
            let json = serde_json::to_value(phase).unwrap();
            assert_eq!(json, phase.as_str());
        }
        assert_eq!(Status::parse("paused"), Some(Status::Paused));
        assert_eq!(Status::parse("done"), None);
    }

    #[test]
    fn phase_change_sets_status_and_stamps() {
        let c = apply(
            Phase::Received,
            Status::Active,
            Some(Phase::PlanningCompleted),
            None,
        )
        .unwrap();
        assert_eq!(c.status, Status::Active);
        assert!(c.stamps.plan_generated && !c.stamps.completed);
        let c = apply(
            Phase::ExecutingPlan,
            Status::Paused,
            Some(Phase::SynthesizingAnswer),
            None,
        )
        .unwrap();
        assert_eq!(
            c.status,
            Status::Active,
            "a phase change resumes a paused task"
        );
        assert!(c.stamps.synthesis_started);
        let c = apply(
            Phase::SynthesizingAnswer,
            Status::Active,
            Some(Phase::FailedSynthesis),
            None,
        )
        .unwrap();
        assert_eq!((c.status, c.stamps.completed), (Status::Failed, true));
    }

    #[test]
    fn illegal_phase_names_the_allowed_ones() {
        let err = apply(
            Phase::Received,
            Status::Active,
            Some(Phase::CompletedSuccess),
            None,
        )
        .unwrap_err();
        assert_eq!(err.field, "phase");
        assert!(err.allowed.contains(&"PLANNING"));
        assert!(
            err.detail()
                .contains("allowed: PLANNING, PLANNING_COMPLETED")
        );
        let err = apply(
            Phase::CompletedSuccess,
            Status::Completed,
            Some(Phase::Planning),
            None,
        )
        .unwrap_err();
        assert!(err.allowed.is_empty());
        assert!(err.detail().contains("final"));
    }

    #[test]
    fn status_changes_move_the_phase() {
        let c = apply(
            Phase::ExecutingPlan,
            Status::Active,
            None,
            Some(Status::Completed),
        )
        .unwrap();
        assert_eq!(c.phase, Phase::CompletedSuccess);
        assert!(c.stamps.completed);
        let c = apply(
            Phase::ExecutingReplan,
            Status::Active,
            None,
            Some(Status::Failed),
        )
        .unwrap();
        assert_eq!(c.phase, Phase::FailedRecoveryExecution);
        let c = apply(Phase::Received, Status::Active, None, Some(Status::Failed)).unwrap();
        assert_eq!(c.phase, Phase::FailedPlanning);
        let c = apply(
            Phase::ExecutingPlan,
            Status::Active,
            None,
            Some(Status::Paused),
        )
        .unwrap();
        assert_eq!((c.phase, c.status), (Phase::ExecutingPlan, Status::Paused));
        let err = apply(
            Phase::CompletedSuccess,
            Status::Completed,
            None,
            Some(Status::Active),
        )
        .unwrap_err();
        assert_eq!(err.field, "status");
        let err = apply(
            Phase::ExecutingPlan,
            Status::Cancelled,
            None,
            Some(Status::Paused),
        )
        .unwrap_err();
        assert!(err.detail().contains("cancelled is final"));
    }

    #[test]
    fn same_value_is_a_no_op() {
        let c = apply(
            Phase::ExecutingPlan,
            Status::Active,
            Some(Phase::ExecutingPlan),
            Some(Status::Active),
        )
        .unwrap();
        assert_eq!(c.stamps, Stamps::default());
    }

    #[test]
    fn plans_and_items_move_the_phase() {
        assert_eq!(
            on_plan(Phase::Received, Status::Active).unwrap(),
            Some(Phase::PlanningCompleted)
        );
        assert_eq!(
            on_plan(Phase::ExecutingPlan, Status::Active).unwrap(),
            Some(Phase::ExecutingReplan)
        );
        assert_eq!(
            on_plan(Phase::ExecutingReplan, Status::Paused).unwrap(),
            None
        );
        assert!(on_plan(Phase::CompletedSuccess, Status::Completed).is_err());
        assert_eq!(
            on_item_progress(Phase::PlanningCompleted),
            Some(Phase::ExecutingPlan)
        );
        assert_eq!(on_item_progress(Phase::ExecutingReplan), None);
    }
}
