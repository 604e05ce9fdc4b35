//! `events.k8s.io/v1` Events through kube-runtime's Recorder, which folds repeats of the same
//! event into a series (as client-go's event broadcaster does).

use berth_core::object::Kind;
use berth_core::Record;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};

use super::Ctx;
use crate::kinds::api_version;

/// The API's limit on an event's note.
const NOTE_LIMIT: usize = 1024;

pub(super) async fn publish(ctx: &Ctx, r: &Record) {
    let reference = ObjectReference {
        api_version: Some(api_version(r.involved.kind).into()),
        kind: Some(r.involved.kind.as_str().into()),
        name: Some(r.involved.name.to_string()),
        namespace: (!r.involved.namespace.is_empty()).then(|| r.involved.namespace.to_string()),
        uid: (!r.uid.is_empty()).then(|| r.uid.clone()),
        ..ObjectReference::default()
    };
    let event = Event {
        type_: if r.type_ == "Warning" {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: r.reason.clone(),
        note: Some(truncate(&r.message, NOTE_LIMIT)),
        action: action(&r.reason, r.involved.kind).into(),
        secondary: None,
    };
    let res = ctx.recorder.publish(&event, &reference).await;
    ctx.metrics.request(
        "event",
        res.as_ref().map_or_else(crate::retry::code, |_| 201),
    );
    if let Err(e) = res {
        tracing::debug!(error = %e, reason = r.reason, object = %r.involved, "event not recorded");
    }
}

/// kube-scheduler's actions: `Binding` for Scheduled, `Scheduling` for FailedScheduling,
/// `Preempting` for Preempted.
fn action(reason: &str, kind: Kind) -> &'static str {
    match (reason, kind) {
        ("Scheduled", _) => "Binding",
        ("Preempted", _) => "Preempting",
        (_, Kind::Reservation) => "Reserving",
        _ => "Scheduling",
    }
}

fn truncate(s: &str, limit: usize) -> String {
    if s.len() <= limit {
        return s.to_string();
    }
    let mut end = limit;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_cut_on_a_character_boundary() {
        let s = "é".repeat(600);
        let t = truncate(&s, NOTE_LIMIT);
        assert!(t.len() <= NOTE_LIMIT);
        assert_eq!(t.chars().count(), 512);
    }
}
