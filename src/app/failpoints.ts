/**
 * The named crash points live with the hooks the process installs, in src/app/ports/failpoints.ts (driven adapters
 * such as the registry transaction pass points too); app modules may import them from here or from there.
 */
