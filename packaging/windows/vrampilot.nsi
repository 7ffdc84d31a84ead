; VRAM Pilot installer for Windows (NSIS 3, Unicode). Built by packaging/windows/build.py (make package-windows):
;
;   makensis -WX "-XTarget amd64-unicode" -DVERSION=0.1.0 -DSOURCE_DIR=dist/windows/vrampilot -DOUTFILE=dist/VRAM_Pilot-0.1.0-setup.exe packaging/windows/vrampilot.nsi
;
; SOURCE_DIR is the PyInstaller onedir (vrampilot.exe without a console window for the Start menu,
; vrampilot-cli.exe for the command line, _internal\). Relative paths are relative to this file.
; What it does: installs to Program Files, a Start-menu entry, an optional desktop shortcut, an
; optional .gguf association (Open with, and the default only where .gguf had none), an entry in
; Apps & features, and an uninstaller that removes all of it: files it installed, shortcuts and every
; registry key or value it wrote. The user's chats and settings (%LOCALAPPDATA%\VRAMPilot) stay
; unless the user ticks the uninstaller's option to remove them.

Unicode true
ManifestDPIAware true
SetCompressor /SOLID lzma

!ifndef VERSION
  !define VERSION "0.1.0"
!endif
!ifndef SOURCE_DIR
  !define SOURCE_DIR "..\..\dist\vrampilot"
!endif
!ifndef OUTFILE
  !define OUTFILE "..\..\dist\VRAMPilot-${VERSION}-setup.exe"
!endif

!define APP_NAME "VRAM Pilot"
!define APP_ID "VRAMPilot"
!define EXE "vrampilot.exe"
!define CLI_EXE "vrampilot-cli.exe"
!define PROGID "VRAMPilot.gguf"
!define UNINSTALL_KEY "Software\Microsoft\Windows\CurrentVersion\Uninstall\${APP_ID}"
!define APP_KEY "Software\${APP_ID}"

!include "MUI2.nsh"
!include "x64.nsh"
!include "LogicLib.nsh"

Name "${APP_NAME}"
OutFile "${OUTFILE}"
InstallDir "$PROGRAMFILES64\${APP_NAME}"
InstallDirRegKey HKLM "${APP_KEY}" "InstallDir"
RequestExecutionLevel admin
BrandingText "${APP_NAME} ${VERSION}"

VIProductVersion "${VERSION}.0"
VIAddVersionKey "ProductName" "${APP_NAME}"
VIAddVersionKey "ProductVersion" "${VERSION}"
VIAddVersionKey "FileVersion" "${VERSION}"
VIAddVersionKey "FileDescription" "${APP_NAME} installer"
VIAddVersionKey "LegalCopyright" "MIT License"

!define MUI_ICON "..\icons\vrampilot.ico"
!define MUI_UNICON "..\icons\vrampilot.ico"
!define MUI_ABORTWARNING
!define MUI_COMPONENTSPAGE_SMALLDESC
!define MUI_FINISHPAGE_RUN "$INSTDIR\${EXE}"
!define MUI_FINISHPAGE_RUN_TEXT "Start ${APP_NAME}"

!insertmacro MUI_PAGE_WELCOME
!insertmacro MUI_PAGE_COMPONENTS
!insertmacro MUI_PAGE_DIRECTORY
!insertmacro MUI_PAGE_INSTFILES
!insertmacro MUI_PAGE_FINISH

!insertmacro MUI_UNPAGE_CONFIRM
!insertmacro MUI_UNPAGE_COMPONENTS
!insertmacro MUI_UNPAGE_INSTFILES

!insertmacro MUI_LANGUAGE "English"

Function .onInit
  ${IfNot} ${RunningX64}
    MessageBox MB_ICONSTOP "${APP_NAME} needs 64-bit Windows."
    Abort
  ${EndIf}
  SetRegView 64
  SetShellVarContext all
FunctionEnd

Function un.onInit
  SetRegView 64
  SetShellVarContext all
FunctionEnd

Section "${APP_NAME} (required)" SecApp
  SectionIn RO
  SetOutPath "$INSTDIR"
  ; A previous version's files go first, so no stale library shadows a new one.
  RMDir /r "$INSTDIR\_internal"
  File /r "${SOURCE_DIR}\*.*"
  WriteUninstaller "$INSTDIR\uninstall.exe"

  CreateShortCut "$SMPROGRAMS\${APP_NAME}.lnk" "$INSTDIR\${EXE}" "" "$INSTDIR\${EXE}" 0 SW_SHOWNORMAL "" "Plan, run and explain local GGUF models"

  WriteRegStr HKLM "${APP_KEY}" "InstallDir" "$INSTDIR"
  WriteRegStr HKLM "${UNINSTALL_KEY}" "DisplayName" "${APP_NAME}"
  WriteRegStr HKLM "${UNINSTALL_KEY}" "DisplayVersion" "${VERSION}"
  WriteRegStr HKLM "${UNINSTALL_KEY}" "Publisher" "${APP_NAME} developers"
  WriteRegStr HKLM "${UNINSTALL_KEY}" "DisplayIcon" "$INSTDIR\${EXE},0"
  WriteRegStr HKLM "${UNINSTALL_KEY}" "InstallLocation" "$INSTDIR"
  WriteRegStr HKLM "${UNINSTALL_KEY}" "UninstallString" '"$INSTDIR\uninstall.exe"'
  WriteRegStr HKLM "${UNINSTALL_KEY}" "QuietUninstallString" '"$INSTDIR\uninstall.exe" /S'
  WriteRegDWORD HKLM "${UNINSTALL_KEY}" "NoModify" 1
  WriteRegDWORD HKLM "${UNINSTALL_KEY}" "NoRepair" 1
SectionEnd

Section /o "Desktop shortcut" SecDesktop
  CreateShortCut "$DESKTOP\${APP_NAME}.lnk" "$INSTDIR\${EXE}" "" "$INSTDIR\${EXE}" 0
SectionEnd

Section "Open .gguf model files with ${APP_NAME}" SecAssoc
  WriteRegStr HKLM "Software\Classes\${PROGID}" "" "GGUF model"
  WriteRegStr HKLM "Software\Classes\${PROGID}\DefaultIcon" "" "$INSTDIR\${EXE},0"
  WriteRegStr HKLM "Software\Classes\${PROGID}\shell\open\command" "" '"$INSTDIR\${EXE}" gui "%1"'
  WriteRegStr HKLM "Software\Classes\.gguf\OpenWithProgids" "${PROGID}" ""
  WriteRegStr HKLM "Software\Classes\Applications\${EXE}\SupportedTypes" ".gguf" ""
  WriteRegStr HKLM "Software\Classes\Applications\${EXE}" "FriendlyAppName" "${APP_NAME}"
  ; Become the default only where no other program is: never take .gguf from another app.
  ReadRegStr $0 HKLM "Software\Classes\.gguf" ""
  ${If} $0 == ""
    WriteRegStr HKLM "Software\Classes\.gguf" "" "${PROGID}"
  ${EndIf}
  System::Call 'shell32::SHChangeNotify(i 0x08000000, i 0, p 0, p 0)' ; SHCNE_ASSOCCHANGED
SectionEnd

Section "-EstimatedSize"
  SectionGetSize ${SecApp} $0
  WriteRegDWORD HKLM "${UNINSTALL_KEY}" "EstimatedSize" $0
SectionEnd

!insertmacro MUI_FUNCTION_DESCRIPTION_BEGIN
  !insertmacro MUI_DESCRIPTION_TEXT ${SecApp} "The app, its own Python and llama.cpp, and a small embedded model."
  !insertmacro MUI_DESCRIPTION_TEXT ${SecDesktop} "A shortcut on the desktop."
  !insertmacro MUI_DESCRIPTION_TEXT ${SecAssoc} "Double-click a .gguf file to plan and run it."
!insertmacro MUI_FUNCTION_DESCRIPTION_END

; ------------------------------------------------------------------------------------ uninstaller

Section "un.${APP_NAME}" UnSecApp
  SectionIn RO
  ; Only what the installer put there: a folder the user chose that holds other files keeps them.
  RMDir /r "$INSTDIR\_internal"
  Delete "$INSTDIR\${EXE}"
  Delete "$INSTDIR\${CLI_EXE}"
  Delete "$INSTDIR\uninstall.exe"
  RMDir "$INSTDIR"

  Delete "$SMPROGRAMS\${APP_NAME}.lnk"
  Delete "$DESKTOP\${APP_NAME}.lnk"

  ReadRegStr $0 HKLM "Software\Classes\.gguf" ""
  ${If} $0 == "${PROGID}"
    DeleteRegValue HKLM "Software\Classes\.gguf" ""
  ${EndIf}
  DeleteRegValue HKLM "Software\Classes\.gguf\OpenWithProgids" "${PROGID}"
  DeleteRegKey /ifempty HKLM "Software\Classes\.gguf\OpenWithProgids"
  DeleteRegKey /ifempty HKLM "Software\Classes\.gguf"
  DeleteRegKey HKLM "Software\Classes\${PROGID}"
  DeleteRegKey HKLM "Software\Classes\Applications\${EXE}"
  DeleteRegKey HKLM "${UNINSTALL_KEY}"
  DeleteRegKey HKLM "${APP_KEY}"
  System::Call 'shell32::SHChangeNotify(i 0x08000000, i 0, p 0, p 0)'
SectionEnd

Section /o "un.Also remove my chats, settings and downloaded models" UnSecData
  SetShellVarContext current
  RMDir /r "$LOCALAPPDATA\${APP_ID}"
  SetShellVarContext all
SectionEnd

!insertmacro MUI_UNFUNCTION_DESCRIPTION_BEGIN
  !insertmacro MUI_DESCRIPTION_TEXT ${UnSecApp} "The program files, shortcuts, the .gguf association and its registry keys."
  !insertmacro MUI_DESCRIPTION_TEXT ${UnSecData} "%LOCALAPPDATA%\${APP_ID}: kept unless ticked."
!insertmacro MUI_UNFUNCTION_DESCRIPTION_END
