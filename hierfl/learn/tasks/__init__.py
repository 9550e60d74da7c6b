"""Server-task plug-ins: one module per task, each registering itself with
:func:`hierfl.learn.server_tasks.server_task` when imported (every module here is imported the first
time a task is looked up)."""
