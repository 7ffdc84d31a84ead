/* A stand-in for Windows' system icuuc.dll, for Wine only (packaging/windows/build.py builds
 * every .c file here into the DLL of its name, in a test or build prefix's system32).
 *
 * PySide6 6.11's Qt6Core.dll imports 20 ucnv_* functions from the icuuc.dll that Windows 10 1703+
 * has in System32; Wine 8 has none, so QtCore fails with "DLL load failed". This DLL goes into a
 * Wine prefix's windows\system32 only: it is never bundled (PyInstaller skips system folders), so
 * the installer stays as on Windows, where the real one is used. Qt asks ICU for legacy codecs
 * only (QStringConverter::encodingForName etc.): "no converter" makes Qt use its own UTF codecs.
 * The list is `objdump -p Qt6Core.dll` under "DLL Name: icuuc.dll". On x64 the caller cleans
 * the stack, so the no-op stubs need no exact prototypes; the two that must answer do.
 */
#include <stdint.h>

#define U_FILE_ACCESS_ERROR 4
#define EXPORT __declspec(dllexport)

EXPORT void *ucnv_open(const char *name, int32_t *err) {
    (void)name;
    if (err && *err <= 0) *err = U_FILE_ACCESS_ERROR;
    return 0;
}
EXPORT int32_t ucnv_countAvailable(void) { return 0; }
EXPORT const char *ucnv_getAvailableName(int32_t n) { (void)n; return 0; }
EXPORT const char *ucnv_getStandardName(const char *name, const char *standard, int32_t *err) {
    (void)name; (void)standard;
    if (err && *err <= 0) *err = U_FILE_ACCESS_ERROR;
    return 0;
}

#define NOOP(name) EXPORT intptr_t name(void) { return 0; }
NOOP(ucnv_close)
NOOP(UCNV_FROM_U_CALLBACK_SUBSTITUTE)
NOOP(UCNV_TO_U_CALLBACK_SUBSTITUTE)
NOOP(ucnv_reset)
NOOP(ucnv_getMaxCharSize)
NOOP(ucnv_getName)
NOOP(ucnv_getToUCallBack)
NOOP(ucnv_getFromUCallBack)
NOOP(ucnv_setToUCallBack)
NOOP(ucnv_setFromUCallBack)
NOOP(ucnv_cbToUWriteUChars)
NOOP(ucnv_toUnicode)
NOOP(ucnv_cbFromUWriteUChars)
NOOP(ucnv_toUCountPending)
NOOP(ucnv_fromUCountPending)
NOOP(ucnv_fromUnicode)
