import type { FilesystemChanges } from '../../core/sessions-skip.js';
import type { GpuGrant } from '../../core/gpu/gpu-proof.js';
import type { NetworkChoice } from '../../core/pair-network.js';
import type { ContainerDiskFootprint, ImageNodes } from './container-runtime.js';

/*
 * The engine ports are closed (`ContainerEngine`, `ContainerRuntime`, `SessionEngine`: every method required). What
 * only some runtimes can do is a capability of its own, an interface that a runtime which has it implements; a caller
 * asks with the capability's typed check (`canPinImages(runtime)` narrows it to `ContainerRuntime & ImagePins`) and
 * goes without it otherwise, as each capability's comment says.
 */

/** The image's id (`sha256:…`) on this engine, or null when it is not there: what `e1-batch start` pins (SPEC §3). Without it (a swarm's runtime) pairs run by tag. */
export interface ImagePins {
  imageId(image: string): Promise<string | null>;
}

/** A swarm's runtime (issue 43): which nodes' engines hold the image now and which do not (each configured node asked; a node that does not answer is an error). Null: one engine, nothing to place. */
export interface ImagePlacement {
  imageNodes(image: string): Promise<ImageNodes | null>;
}

/**
 * What the container changed in its writable layer, its image id and its mount points (null: no such container).
 * With `under`, the changes may be only those at, under or above `under` (what `untouchedByContainer(changes, under)`
 * reads), whichever the runtime finds cheaper. Without it the sessions directory is always copied out.
 */
export interface LayerChanges {
  filesystemChanges(id: string, under?: string): Promise<FilesystemChanges | null>;
}

/**
 * True when no component of the absolute `path` in the container, from `/` down, is a symbolic link (a missing one
 * cannot be: true also when the path, or a folder above it, does not exist); false when one is, when the container is
 * gone, or when the engine cannot say. A write through a link shows in the changes under the link's target, not under
 * `path`. Without it the sessions-copy skip never learns (every dir is copied).
 */
export interface LinkChecks {
  linkFreePath(id: string, path: string): Promise<boolean>;
}

/** What the engine kept of the container's GPU request (its inspect: DeviceRequests, CDI devices), null when the container is gone. Without it a runtime cannot prove a GPU request was kept (issue 28). */
export interface GpuGrants {
  gpuGrantOf(id: string): Promise<GpuGrant | null>;
}

/** Runtimes whose containers do not share this host's file system: copy what the pair wrote into its `collect` mounts back into their host folders (after it stopped, before the outcome is read). Without it: nothing to copy. */
export interface MountCollection {
  collectMounts(id: string): Promise<void>;
}

/**
 * What of the container's disk the host cannot find in the pair's folders (one inspect with sizes, bounded by the
 * call's deadline): its writable layer's bytes, its volumes' host folders and its first process; null when the
 * container is gone or the runtime cannot tell. Without it only the folders are counted.
 */
export interface DiskFootprints {
  diskFootprint(id: string): Promise<ContainerDiskFootprint | null>;
}

/**
 * A live session container off every network it is on (loopback stays), then onto `to`'s network unless "none" (the
 * guarded pairs network ensured first, as at a create): a session's egress switch (docs/spec.md §5.6). Without it a
 * session's egress cannot be switched live.
 */
export interface NetworkMoves {
  moveNetwork(id: string, to: NetworkChoice): Promise<void>;
}

/**
 * A create on `choice`'s network is coming (issue 39): what guards that network may be looked at now, beside the
 * caller's own checks, instead of right before the create (the guarded pairs network: its rules' listing, begun now
 * and taken by the process's first create). Never fails: whatever goes wrong is the create's to find. Without it
 * everything is looked at by the create.
 */
export interface NetworkPreparation {
  prepareNetwork(choice: NetworkChoice): void;
}

const has = (port: object, method: string): boolean =>
  typeof (port as Record<string, unknown>)[method] === 'function';

export const canPinImages = (port: object): port is ImagePins => has(port, 'imageId');
export const canPlaceImages = (port: object): port is ImagePlacement => has(port, 'imageNodes');
export const canListLayerChanges = (port: object): port is LayerChanges => has(port, 'filesystemChanges');
export const canCheckLinks = (port: object): port is LinkChecks => has(port, 'linkFreePath');
export const canProveGpuGrants = (port: object): port is GpuGrants => has(port, 'gpuGrantOf');
export const canCollectMounts = (port: object): port is MountCollection => has(port, 'collectMounts');
export const canMeasureDisk = (port: object): port is DiskFootprints => has(port, 'diskFootprint');
export const canMoveNetworks = (port: object): port is NetworkMoves => has(port, 'moveNetwork');
export const canPrepareNetworks = (port: object): port is NetworkPreparation => has(port, 'prepareNetwork');
