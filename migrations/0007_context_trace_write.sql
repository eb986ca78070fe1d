-- Context Assembler trace write (docs/performance.md). context_traces rows are only ever
-- written by insert_context_trace, in the same statement as their context_calls row, and
-- neither table is updated or deleted from: the reference holds by construction. Its check
-- (one RI trigger per decision row) was half the cost of writing a 256-decision trace on
-- every POST /v1/context. A future retention job must delete a call's traces with the call.
ALTER TABLE context_traces DROP CONSTRAINT context_traces_project_id_trace_id_fkey;
