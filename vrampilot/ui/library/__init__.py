"""The model library: the Models list (files and folders added, the built-in model) and its
controller, which lists and describes them off the GUI thread and says which model the user chose;
the Plan panel plans that one."""
