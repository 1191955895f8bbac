/* QEMU fw_cfg, legacy port interface: 16-bit selector at 0x510, data bytes at 0x511. */
#ifndef KIT_FW_CFG_H
#define KIT_FW_CFG_H
#include <stdint.h>

#define FW_CFG_SIGNATURE 0x0000 /* "QEMU" */
#define FW_CFG_ID        0x0001
#define FW_CFG_RAM_SIZE  0x0003 /* u64 */
#define FW_CFG_NB_CPUS   0x0005 /* u16 */
#define FW_CFG_MAX_RAM   0x0011 /* u64 */

/* Select key and read len bytes of it (little-endian items). */
void fw_cfg_read(uint16_t key, void *buf, unsigned len);

#endif
