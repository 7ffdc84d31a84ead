"""The chat: the conversation view and its controller (one enum of states, the reply on the engine
thread), the chat list and its search, the Markdown view of replies, and the documents attached to a
chat (their panel and controller, which fit them to the plan's context)."""
