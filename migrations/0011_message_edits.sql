-- Edited and deleted chat messages.
--
-- A client re-sends the visible conversation, so a message can arrive again with other content:
-- an AI reply that was still streaming at one archive and complete at the next, or a message the
-- user edited. The archive then updates the stored message in place (its seq and time stay, so
-- it keeps its place). `edited_at` is the client's time of the state stored: a resend older than
-- it does not overwrite it. NULL: the message as first written.
ALTER TABLE conversation_messages ADD COLUMN edited_at timestamptz;

-- Each archive batch also counts the messages it updated and deleted.
ALTER TABLE recent_conversation_history
    ADD COLUMN updated_count integer NOT NULL DEFAULT 0,
    ADD COLUMN deleted_count integer NOT NULL DEFAULT 0;
