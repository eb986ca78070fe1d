/**
 * Named shapes of the HTTP contract, taken from the generated `schema.ts` (openapi-typescript over
 * the OpenAPI document the service serves at /docs/openapi.json; `just ts-types` regenerates it).
 *
 * Wire objects keep the contract's snake_case field names; the client's own options are camelCase.
 */
import type { components } from "./schema.js";

type Schemas = components["schemas"];

export type FactIn = Schemas["FactIn"];
export type EventIn = Schemas["EventIn"];
export type WriteFactsResponse = Schemas["WriteFactsResponse"];
export type FactWriteResult = Schemas["FactWriteResult"];
export type WriteEventsResponse = Schemas["WriteEventsResponse"];
export type EventWriteResult = Schemas["EventWriteResult"];
export type Fact = Schemas["Fact"];
export type FactPage = Schemas["FactPage"];
export type ConflictList = Schemas["ConflictList"];
export type ConflictSet = Schemas["ConflictSet"];
export type ConflictMember = Schemas["ConflictMember"];
export type ContextRequest = Schemas["ContextRequest"];
export type ContextPacket = Schemas["ContextPacket"];
export type PacketFact = Schemas["PacketFact"];
export type PacketEpisode = Schemas["PacketEpisode"];
export type Inspection = Schemas["Inspection"];
export type TraceDecision = Schemas["Decision"];
export type StatsOverview = Schemas["StatsOverview"];
export type Health = Schemas["Health"];
export type ErrorBody = Schemas["ErrorBody"];
export type ReplayResponse = Schemas["ReplayResponse"];
export type ReplayDiff = Schemas["ReplayDiff"];
export type ReplayChange = Schemas["ReplayChange"];
export type FactStats = Schemas["FactStats"];
export type FactUsage = Schemas["FactUsage"];

// Memory lifecycle (erasure, listing, export) and extraction.
export type Event = Schemas["Event"];
export type EventPage = Schemas["EventPage"];
export type EventErasure = Schemas["EventErasure"];
export type FactErasure = Schemas["FactErasure"];
export type SubjectErasure = Schemas["SubjectErasure"];
export type SubjectPage = Schemas["SubjectPage"];
export type SubjectSummary = Schemas["SubjectSummary"];
export type ExtractMessage = Schemas["ExtractMessage"];
export type ExtractResult = Schemas["ExtractResponse"];
export type ExtractedFact = Schemas["ExtractedFact"];
export type RefusedFact = Schemas["RefusedFact"];

// Webhooks: subscriptions and their deliveries.
export type CreateWebhookRequest = Schemas["CreateWebhookRequest"];
export type WebhookCreated = Schemas["WebhookCreated"];
export type WebhookDeleted = Schemas["WebhookDeleted"];
export type WebhookList = Schemas["WebhookList"];
export type WebhookSummary = Schemas["WebhookSummary"];
export type WebhookDeliveryList = Schemas["WebhookDeliveryList"];
export type WebhookDelivery = Schemas["WebhookDelivery"];
/** The event kinds a webhook may subscribe to: `conflict.opened`, `fact.retracted`, ... */
export type WebhookEventType = CreateWebhookRequest["events"][number];
/** `pending`, `delivered` or `dead` (a dead letter). */
export type WebhookDeliveryStatus = WebhookDelivery["status"];

/**
 * One line of an export document (GET /v1/subjects/export?subject_id=), parsed: the header
 * (`haki_export`, `project_id`, `subject_id`, `exported_at`), then events (`kind: "event"`),
 * facts (`kind: "fact"`) and, from `haki_export` 2, conflict sets (`kind: "conflict_set"`) and
 * an end line counting the lines of each kind (`kind: "end"`). Not
 * in the OpenAPI document (the route answers JSON Lines).
 */
export type ExportLine = {
  [key: string]: unknown;
  kind?: "event" | "fact" | "conflict_set" | "end" | (string & {});
};

/** The context profiles a call may ask for. */
export type ContextProfile = "unified" | "facts_first";

export type { components, operations, paths } from "./schema.js";
