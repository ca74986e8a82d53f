//! The classic group protocol: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//! DescribeGroups and ListGroups. The group logic is in `broker::group::state`; this file turns
//! requests into its calls and its answers into responses.

use std::collections::BTreeMap;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{
    BrokerId as WireBrokerId, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, LeaveGroupRequest, LeaveGroupResponse,
    ListGroupsRequest, ListGroupsResponse, ResponseKind, SyncGroupRequest,
};
use kafka_protocol::protocol::StrBytes;

use super::records::OffsetsRecord;
use super::state::{Effects, Group, GroupReply, GroupState, JoinRequest};
use super::{GroupCoordinator, GroupWrite, OffsetsLog, PendingDeletion};
use crate::node_io::{Output, ReplyTo, ResponseBody};
use crate::protocol::ErrorCode;
use crate::types::Millis;

/// FindCoordinator key types.
const GROUP_KEY: i8 = 0;

fn text(value: &StrBytes) -> String {
    value.as_str().to_owned()
}

fn wire(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

impl GroupCoordinator {
    pub(crate) fn on_find_coordinator_request<H: OffsetsLog>(
        &mut self,
        now: Millis,
        api_version: i16,
        request: &FindCoordinatorRequest,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
    ) -> ResponseKind {
        let keys: Vec<StrBytes> = if api_version >= 4 {
            request.coordinator_keys.clone()
        } else {
            vec![request.key.clone()]
        };
        let mut coordinators = Vec::new();
        for key in keys {
            let found = if request.key_type != GROUP_KEY {
                Err((
                    ErrorCode::InvalidRequest,
                    format!(
                        "key type {} (transactions) is not implemented",
                        request.key_type
                    ),
                ))
            } else if key.is_empty() {
                Err((ErrorCode::InvalidRequest, "an empty group id".to_owned()))
            } else {
                self.find_coordinator(now, key.as_str(), host, out)
                    .map_err(|error| (error, format!("{error:?}")))
            };
            let mut entry = Coordinator::default().with_key(key);
            match found {
                Ok((node, host, port)) => {
                    entry = entry
                        .with_node_id(WireBrokerId(node))
                        .with_host(StrBytes::from_string(host))
                        .with_port(port);
                }
                Err((error, message)) => {
                    entry = entry
                        .with_node_id(WireBrokerId(-1))
                        .with_port(-1)
                        .with_error_code(error.code())
                        .with_error_message(Some(StrBytes::from_string(message)));
                }
            }
            coordinators.push(entry);
        }
        let mut response = FindCoordinatorResponse::default();
        if api_version >= 4 {
            response.coordinators = coordinators;
        } else if let Some(entry) = coordinators.pop() {
            response.error_code = entry.error_code;
            response.node_id = entry.node_id;
            response.host = entry.host;
            response.port = entry.port;
            if api_version >= 1 {
                response.error_message = entry.error_message;
            }
        }
        ResponseKind::FindCoordinator(response)
    }

    /// Runs `op` on the group (created if missing when `create`), after the coordinator checks;
    /// `Err` when this broker does not coordinate it (or the group is unknown).
    fn with_group<H: OffsetsLog>(
        &mut self,
        now: Millis,
        group_id: &str,
        create: bool,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
        op: impl FnOnce(&mut Group, &mut Effects),
    ) -> Result<(), ErrorCode> {
        self.coordinate(now, group_id, host, out)?;
        if create && !self.groups.contains_key(group_id) {
            self.groups
                .insert(group_id.to_owned(), Group::new(group_id.to_owned()));
        }
        let group = self
            .groups
            .get_mut(group_id)
            .ok_or(ErrorCode::UnknownMemberId)?;
        let mut fx = Effects::default();
        op(group, &mut fx);
        self.apply_effects(now, group_id, fx, host, out);
        Ok(())
    }

    pub(crate) fn on_join_group_request<H: OffsetsLog>(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        (client_id, client_host): (Option<&str>, Option<&str>),
        request: &JoinGroupRequest,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
    ) {
        let version = reply_to.api_version();
        let limits = self.limits();
        let groups = &self.config;
        let session = request.session_timeout_ms;
        let fail =
            |error: ErrorCode| GroupReply::join_error(reply_to, error, text(&request.member_id));
        if session < groups.min_session_timeout_ms || session > groups.max_session_timeout_ms {
            return Self::send_replies(vec![fail(ErrorCode::InvalidSessionTimeout)], out);
        }
        let client_id = client_id.unwrap_or_default().to_owned();
        let new_member_id = format!(
            "{client_id}-{}",
            uuid::Uuid::from_u64_pair(host.random_u64(), host.random_u64())
        );
        let join = JoinRequest {
            reply_to,
            member_id: text(&request.member_id),
            group_instance_id: request.group_instance_id.as_ref().map(text),
            client_id,
            client_host: client_host.unwrap_or("/unknown").to_owned(),
            session_timeout_ms: session,
            // v0 has no rebalance timeout: Kafka uses the session timeout.
            rebalance_timeout_ms: if version >= 1 {
                request.rebalance_timeout_ms
            } else {
                session
            },
            protocol_type: text(&request.protocol_type),
            protocols: request
                .protocols
                .iter()
                .map(|protocol| (text(&protocol.name), protocol.metadata.clone()))
                .collect(),
            require_known_member_id: version >= 4,
        };
        let outcome = self.with_group(
            now,
            request.group_id.as_str(),
            true,
            host,
            out,
            |group, fx| {
                group.join(now, join, new_member_id, limits, fx);
            },
        );
        if let Err(error) = outcome {
            Self::send_replies(vec![fail(error)], out);
        }
    }

    pub(crate) fn on_sync_group_request<H: OffsetsLog>(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        request: &SyncGroupRequest,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
    ) {
        let assignments: BTreeMap<String, bytes::Bytes> = request
            .assignments
            .iter()
            .map(|entry| (text(&entry.member_id), entry.assignment.clone()))
            .collect();
        let member_id = text(&request.member_id);
        let instance = request.group_instance_id.as_ref().map(text);
        let protocol_type = request.protocol_type.as_ref().map(text);
        let protocol_name = request.protocol_name.as_ref().map(text);
        let outcome = self.with_group(
            now,
            request.group_id.as_str(),
            false,
            host,
            out,
            |group, fx| {
                group.sync(
                    now,
                    reply_to,
                    &member_id,
                    instance.as_deref(),
                    request.generation_id,
                    (protocol_type.as_deref(), protocol_name.as_deref()),
                    assignments,
                    fx,
                );
            },
        );
        if let Err(error) = outcome {
            let reply = GroupReply::Sync {
                reply_to,
                error,
                protocol_type: None,
                protocol: None,
                assignment: bytes::Bytes::new(),
            };
            Self::send_replies(vec![reply], out);
        }
    }

    pub(crate) fn on_heartbeat_request<H: OffsetsLog>(
        &mut self,
        now: Millis,
        request: &HeartbeatRequest,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
    ) -> ResponseKind {
        let member_id = text(&request.member_id);
        let instance = request.group_instance_id.as_ref().map(text);
        let mut error = ErrorCode::None;
        let outcome = self.with_group(
            now,
            request.group_id.as_str(),
            false,
            host,
            out,
            |group, _| {
                error =
                    group.heartbeat(now, &member_id, instance.as_deref(), request.generation_id);
            },
        );
        if let Err(failed) = outcome {
            error = failed;
        }
        ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(error.code()))
    }

    pub(crate) fn on_leave_group_request<H: OffsetsLog>(
        &mut self,
        now: Millis,
        api_version: i16,
        request: &LeaveGroupRequest,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
    ) -> ResponseKind {
        let leaving: Vec<(String, Option<String>)> = if api_version >= 3 {
            request
                .members
                .iter()
                .map(|member| {
                    (
                        text(&member.member_id),
                        member.group_instance_id.as_ref().map(text),
                    )
                })
                .collect()
        } else {
            vec![(text(&request.member_id), None)]
        };
        let limits = self.limits();
        let mut errors = Vec::new();
        let outcome = self.with_group(
            now,
            request.group_id.as_str(),
            false,
            host,
            out,
            |group, fx| {
                for (member_id, instance) in &leaving {
                    errors.push(group.leave(now, member_id, instance.as_deref(), limits, fx));
                }
            },
        );
        let mut response = LeaveGroupResponse::default();
        match outcome {
            Err(error) => response.error_code = error.code(),
            Ok(()) if api_version >= 3 => {
                response.members = leaving
                    .into_iter()
                    .zip(errors)
                    .map(|((member_id, instance), error)| {
                        MemberResponse::default()
                            .with_member_id(wire(&member_id))
                            .with_group_instance_id(instance.as_deref().map(wire))
                            .with_error_code(error.code())
                    })
                    .collect();
            }
            Ok(()) => {
                response.error_code = errors.first().copied().unwrap_or(ErrorCode::None).code()
            }
        }
        ResponseKind::LeaveGroup(response)
    }

    pub(crate) fn on_describe_groups_request<H: OffsetsLog>(
        &mut self,
        now: Millis,
        api_version: i16,
        request: &DescribeGroupsRequest,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
    ) -> ResponseKind {
        let mut response = DescribeGroupsResponse::default();
        for group_id in &request.groups {
            let mut entry = DescribedGroup::default()
                .with_group_id(group_id.clone())
                .with_group_state(wire("Dead"));
            if api_version >= 3 {
                // Kafka's INT32_MIN unless asked (kafka-python chokes on anything else).
                entry.authorized_operations = i32::MIN;
            }
            match self.coordinate(now, group_id.as_str(), host, out) {
                Err(error) => entry.error_code = error.code(),
                Ok(()) => {
                    if let Some(group) = self.groups.get(group_id.as_str()) {
                        describe(group, api_version, &mut entry);
                    }
                }
            }
            response.groups.push(entry);
        }
        ResponseKind::DescribeGroups(response)
    }

    pub(crate) fn on_list_groups_request<H: OffsetsLog>(
        &mut self,
        api_version: i16,
        request: &ListGroupsRequest,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
    ) -> ResponseKind {
        self.sync_ownership(host, out);
        let states: Vec<String> = request
            .states_filter
            .iter()
            .map(|state| state.as_str().to_ascii_lowercase())
            .collect();
        let types_ok = request.types_filter.is_empty()
            || request
                .types_filter
                .iter()
                .any(|kind| kind.as_str().eq_ignore_ascii_case("classic"));
        let mut response = ListGroupsResponse::default();
        for (id, group) in &self.groups {
            let state = group.state().name();
            if !types_ok || !states.is_empty() && !states.contains(&state.to_ascii_lowercase()) {
                continue;
            }
            let mut entry = ListedGroup::default()
                .with_group_id(GroupId(wire(id)))
                .with_protocol_type(wire(group.protocol_type().unwrap_or_default()));
            if api_version >= 4 {
                entry.group_state = wire(state);
            }
            if api_version >= 5 {
                entry.group_type = wire("classic");
            }
            response.groups.push(entry);
        }
        ResponseKind::ListGroups(response)
    }
}

impl GroupCoordinator {
    /// DeleteGroups: an empty group's offsets and the group itself are tombstoned in
    /// `__consumer_offsets`; the answer waits for every tombstone.
    pub(crate) fn on_delete_groups_request<H: OffsetsLog>(
        &mut self,
        now: Millis,
        reply_to: ReplyTo,
        request: &DeleteGroupsRequest,
        host: &mut H,
        out: &mut Vec<Output<H::File>>,
    ) {
        let mut response = DeleteGroupsResponse::default();
        let mut writes = Vec::new();
        for (index, group_id) in request.groups_names.iter().enumerate() {
            let mut result = DeletableGroupResult::default().with_group_id(group_id.clone());
            let id = group_id.as_str();
            let checked = self.coordinate(now, id, host, out).and_then(|()| {
                match self.groups.get(id).map(Group::state) {
                    None | Some(GroupState::Dead) => Err(ErrorCode::GroupIdNotFound),
                    Some(GroupState::Empty) => Ok(()),
                    Some(_) => Err(ErrorCode::NonEmptyGroup),
                }
            });
            if let Err(error) = checked {
                result.error_code = error.code();
            } else {
                let group = self.groups.remove(id).expect("checked");
                let mut records: Vec<OffsetsRecord> = group
                    .offsets
                    .into_keys()
                    .map(|partition| OffsetsRecord::Offset {
                        group: id.to_owned(),
                        partition,
                        value: None,
                    })
                    .collect();
                records.push(OffsetsRecord::Group {
                    group: id.to_owned(),
                    value: None,
                });
                writes.push((index, id.to_owned(), records));
            }
            response.results.push(result);
        }
        if writes.is_empty() {
            out.push(reply_to.respond(ResponseBody::message(ResponseKind::DeleteGroups(response))));
            return;
        }
        self.next_deletion += 1;
        let deletion = self.next_deletion;
        self.deletions.insert(
            deletion,
            PendingDeletion {
                reply_to,
                response,
                outstanding: writes.len(),
            },
        );
        for (index, group_id, records) in writes {
            let write = GroupWrite::Delete { deletion, index };
            self.write(now, &group_id, &records, write, host, out);
        }
    }
}

/// DescribeGroups' view of a group: members with subscriptions and assignments only once
/// the group is Stable (Kafka's rule).
fn describe(group: &Group, api_version: i16, entry: &mut DescribedGroup) {
    entry.group_state = wire(group.state().name());
    entry.protocol_type = wire(group.protocol_type().unwrap_or_default());
    entry.protocol_data = wire(group.protocol().unwrap_or_default());
    let stable = group.state() == crate::broker::group::state::GroupState::Stable;
    entry.members = group
        .members()
        .iter()
        .map(|(id, member)| {
            let mut described = DescribedGroupMember::default()
                .with_member_id(wire(id))
                .with_client_id(wire(&member.client_id))
                .with_client_host(wire(&member.client_host));
            if api_version >= 4 {
                described.group_instance_id = member.group_instance_id.as_deref().map(wire);
            }
            if stable {
                described.member_metadata = member.metadata(group.protocol().unwrap_or_default());
                described.member_assignment = member.assignment.clone();
            }
            described
        })
        .collect();
}
