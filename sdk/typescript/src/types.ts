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

/** The context profiles a call may ask for. */
export type ContextProfile = "unified" | "facts_first";

export type { components, operations, paths } from "./schema.js";
