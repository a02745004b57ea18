-- The MCP tool call that claimed a record, as operators may see it: the
-- tool's name and its arguments, credential-like fields redacted before
-- they are stored (store.EncodeToolCall); NULL on any other route and
-- for records made before.
ALTER TABLE records ADD COLUMN tool_call bytea;
