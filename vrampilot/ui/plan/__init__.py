"""The Plan panel: the machine it plans for, the target, the pins and the plan shown, and loading it;
the controller asks the planner on a worker and loads on the engine thread. The speed controller
measures the machine the plans predict for."""
