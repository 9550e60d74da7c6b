"""Server tasks no one method owns: one module per task, each registering itself with
:func:`hierfl.learn.server_tasks.server_task` when imported (every module here, and every method
package's ``server`` module, is imported the first time a task is looked up)."""
