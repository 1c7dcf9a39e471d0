import * as Flags from '@oclif/core/flags';
import { BaseCommand } from '../../cli/base-command.js';
import type { BuildReport } from '../../core/synthetic-images.js';
import { buildImages } from '../../image-root.js';

export default class ImagesBuild extends BaseCommand {
  static override summary =
    'Build the synthetic images under docker/ (FROM scratch + static busybox, no pulls).';
  static override description =
    'Each folder of docker/ becomes the image roboguide/<folder>:1. The build context is packed with tar-fs and the ' +
    "host's static busybox is added to it; an image whose context digest is unchanged is not rebuilt.";
  static override examples = [
    '<%= config.bin %> images build',
    '<%= config.bin %> images build --only pair-driver --force --json',
  ];
  static override flags = {
    only: Flags.string({ description: 'build only this image folder (repeatable)', multiple: true }),
    force: Flags.boolean({
      description: 'rebuild even when the context digest is unchanged',
      default: false,
    }),
    busybox: Flags.string({ description: 'path of a static busybox binary', default: '/bin/busybox' }),
  };

  async run(): Promise<{ images: BuildReport[] }> {
    const { flags } = await this.parse(ImagesBuild);
    const images = await buildImages({
      busyboxPath: flags.busybox,
      force: flags.force,
      ...(flags.only ? { only: flags.only } : {}),
    });
    for (const image of images)
      this.log(`${image.tag}: ${image.action === 'built' ? 'built' : 'up to date'}`);
    return { images };
  }
}
