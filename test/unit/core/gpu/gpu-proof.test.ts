import { describe, expect, it } from 'vitest';
import { deviceRequestsFor } from '../../../../src/core/gpu/device-requests.js';
import {
  CDI_DEVICE_NAME,
  gpuRequestDropped,
  judgeGpuView,
  parseGpuProbeOutput,
} from '../../../../src/core/gpu/gpu-proof.js';

const [all] = deviceRequestsFor('all');
const [two] = deviceRequestsFor(2);
const [listed] = deviceRequestsFor(['GPU-a', 'GPU-b']);
const out = (...lines: string[]): string => `${lines.join('\n')}\nprobe=done\n`;

describe('gpuRequestDropped', () => {
  it('no request: nothing to drop; a request kept as DeviceRequests or CDI devices: kept', () => {
    expect(gpuRequestDropped([], { deviceRequests: 0, cdiDevices: 0 })).toBeNull();
    expect(gpuRequestDropped([all!], { deviceRequests: 1, cdiDevices: 0 })).toBeNull();
    expect(gpuRequestDropped([all!], { deviceRequests: 0, cdiDevices: 1 })).toBeNull();
  });
  it('a request the created container does not hold is dropped, and says so', () => {
    expect(gpuRequestDropped([all!], { deviceRequests: 0, cdiDevices: 0 })).toMatch(/holds none/);
  });
  it('CDI names are vendor/class=name', () => {
    expect(CDI_DEVICE_NAME.test('nvidia.com/gpu=0')).toBe(true);
    expect(CDI_DEVICE_NAME.test('nvidia.com/gpu=all')).toBe(true);
    expect(CDI_DEVICE_NAME.test('/dev/nvidia0')).toBe(false);
    expect(CDI_DEVICE_NAME.test('nvidia.com/gpu=')).toBe(false);
  });
});

describe('parseGpuProbeOutput + judgeGpuView', () => {
  it('a container that shows nothing (Podman dropped the request) is not a GPU', () => {
    const view = parseGpuProbeOutput(out('visible_set=', 'visible=', 'smi=absent'));
    expect(view).toEqual({ visibleDevices: null, deviceNodes: [], smi: null, complete: true });
    expect(judgeGpuView(all!, view)).toEqual({
      shown: false,
      why: expect.stringMatching(/no NVIDIA_VISIBLE_DEVICES, no \/dev\/nvidia<N> device nodes/),
    });
  });
  it('NVIDIA_VISIBLE_DEVICES as asked is the least proof (the no-op hook engine); not as asked is none', () => {
    const v = (visible: string) =>
      parseGpuProbeOutput(out('visible_set=1', `visible=${visible}`, 'smi=absent'));
    expect(judgeGpuView(all!, v('all'))).toMatchObject({
      shown: true,
      evidence: expect.stringContaining('NVIDIA_VISIBLE_DEVICES=all as asked'),
    });
    expect(judgeGpuView(two!, v('0,1')).shown).toBe(true);
    expect(judgeGpuView(two!, v('0')).shown).toBe(false);
    expect(judgeGpuView(two!, v('all')).shown).toBe(false);
    expect(judgeGpuView(listed!, v('GPU-b,GPU-a')).shown).toBe(true);
    expect(judgeGpuView(listed!, v('GPU-a')).shown).toBe(false);
    expect(judgeGpuView(all!, v('void')).shown).toBe(false);
    expect(judgeGpuView(all!, v('')).shown).toBe(false);
  });
  it('device nodes count; nvidiactl and friends do not', () => {
    const view = parseGpuProbeOutput(
      out('visible_set=', 'visible=', 'node=/dev/nvidia0', 'node=/dev/nvidiactl', 'smi=absent'),
    );
    expect(view.deviceNodes).toEqual(['/dev/nvidia0']);
    expect(judgeGpuView(all!, view).shown).toBe(true);
    expect(judgeGpuView(two!, view).shown).toBe(false);
  });
  it('nvidia-smi -L decides where the image has it (its GPU lines parsed here only)', () => {
    const smi = (exit: number, ...lines: string[]) =>
      parseGpuProbeOutput(
        out(
          'visible_set=1',
          'visible=all',
          'node=/dev/nvidia0',
          `smi_exit=${exit}`,
          ...lines.map((l) => `smi: ${l}`),
        ),
      );
    const ok = smi(0, 'GPU 0: NVIDIA H200 (UUID: GPU-1b2c)', 'GPU 1: NVIDIA H200 (UUID: GPU-3d4e)');
    expect(ok.smi?.gpus).toHaveLength(2);
    expect(judgeGpuView(two!, ok)).toMatchObject({
      shown: true,
      evidence: expect.stringContaining('lists 2 GPU(s)'),
    });
    const failed = smi(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.");
    expect(judgeGpuView(all!, failed)).toMatchObject({
      shown: false,
      why: expect.stringContaining('exited 9'),
    });
    expect(judgeGpuView(all!, smi(0, 'No devices were found')).shown).toBe(false);
  });
  it('a cut or foreign output is no view', () => {
    expect(judgeGpuView(all!, parseGpuProbeOutput('visible_set=1\nvisible=all\n')).shown).toBe(false);
    expect(judgeGpuView(all!, parseGpuProbeOutput('sh: not found')).shown).toBe(false);
  });
});
