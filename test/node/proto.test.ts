// Checks that proto/grpc_service.proto and proto/health.proto load with the
// options the gRPC server uses, and that they are wire-compatible with
// Triton's / KServe's protocol: every RPC, every field number and type, and
// some hand-computed encodings.

import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import protobuf from 'protobufjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const PROTO_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '../../proto');

// The options the gRPC server is expected to use.
const LOADER_OPTIONS = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
} as const;

let includeDirs: string[] = [PROTO_DIR];
let stubDir: string | undefined;
let pkg: protoLoader.PackageDefinition;
let root: protobuf.Root;

beforeAll(() => {
  // model_config.proto is written separately; if it is not there yet, a
  // minimal stand-in is used from a temp dir (never written into proto/).
  if (!existsSync(join(PROTO_DIR, 'model_config.proto'))) {
    stubDir = mkdtempSync(join(tmpdir(), 'tsi-proto-stub-'));
    writeFileSync(
      join(stubDir, 'model_config.proto'),
      'syntax = "proto3";\npackage inference;\nmessage ModelConfig { string name = 1; }\n',
    );
    includeDirs = [PROTO_DIR, stubDir];
  }
  pkg = protoLoader.loadSync(['grpc_service.proto', 'health.proto'], {
    ...LOADER_OPTIONS,
    includeDirs,
  });
  root = new protobuf.Root();
  root.resolvePath = (_origin, target) => {
    if (isAbsolute(target)) return target;
    for (const dir of includeDirs) {
      const p = join(dir, target);
      if (existsSync(p)) return p;
    }
    return target;
  };
  root.loadSync(['grpc_service.proto', 'health.proto'], { keepCase: true });
  root.resolveAll();
});

afterAll(() => {
  if (stubDir) rmSync(stubDir, { recursive: true, force: true });
});

// ------------------------------------------------------------------ helpers

function shortName(fullName: string): string {
  return fullName.replace(/^\.inference\./, '').replace(/^\./, '');
}

function fieldType(f: protobuf.Field): string {
  const t = f.resolvedType ? shortName(f.resolvedType.fullName) : f.type;
  if (f instanceof protobuf.MapField) return `map<${f.keyType},${t}>`;
  return f.repeated ? `${t}[]` : t;
}

/** "name=id:type ..." in field-number order, plus "oneof x(a,b)" entries. */
function describeType(t: protobuf.Type): string {
  const fields = [...t.fieldsArray]
    .sort((a, b) => a.id - b.id)
    .map((f) => `${f.name}=${f.id}:${fieldType(f)}`);
  const oneofs = t.oneofsArray.map((o) => `oneof ${o.name}(${o.oneof.join(',')})`);
  return [...fields, ...oneofs].join(' ');
}

function allTypes(ns: protobuf.NamespaceBase, out: protobuf.Type[] = []): protobuf.Type[] {
  for (const obj of ns.nestedArray) {
    if (obj instanceof protobuf.Type) out.push(obj);
    if (obj instanceof protobuf.Namespace || obj instanceof protobuf.Type) allTypes(obj, out);
  }
  return out;
}

function method(name: string): protoLoader.MethodDefinition<object, object> {
  const svc = pkg['inference.GRPCInferenceService'] as protoLoader.ServiceDefinition;
  const m = svc[name];
  if (!m) throw new Error(`no method ${name}`);
  return m as protoLoader.MethodDefinition<object, object>;
}

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

// ------------------------------------------------ expected shape (Triton)

// Transcribed from Triton's grpc_service.proto (triton-inference-server/
// common, protobuf/grpc_service.proto, incl. double/uint64 InferParameter,
// response_stats and InferResponseStatistics.cancel).
const SD = 'StatisticDuration';
const EXPECTED_MESSAGES: Record<string, string> = {
  ServerLiveRequest: '',
  ServerLiveResponse: 'live=1:bool',
  ServerReadyRequest: '',
  ServerReadyResponse: 'ready=1:bool',
  ModelReadyRequest: 'name=1:string version=2:string',
  ModelReadyResponse: 'ready=1:bool',
  ServerMetadataRequest: '',
  ServerMetadataResponse: 'name=1:string version=2:string extensions=3:string[]',
  ModelMetadataRequest: 'name=1:string version=2:string',
  ModelMetadataResponse:
    'name=1:string versions=2:string[] platform=3:string ' +
    'inputs=4:ModelMetadataResponse.TensorMetadata[] outputs=5:ModelMetadataResponse.TensorMetadata[]',
  'ModelMetadataResponse.TensorMetadata': 'name=1:string datatype=2:string shape=3:int64[]',
  InferParameter:
    'bool_param=1:bool int64_param=2:int64 string_param=3:string double_param=4:double uint64_param=5:uint64 ' +
    'oneof parameter_choice(bool_param,int64_param,string_param,double_param,uint64_param)',
  InferTensorContents:
    'bool_contents=1:bool[] int_contents=2:int32[] int64_contents=3:int64[] uint_contents=4:uint32[] ' +
    'uint64_contents=5:uint64[] fp32_contents=6:float[] fp64_contents=7:double[] bytes_contents=8:bytes[]',
  ModelInferRequest:
    'model_name=1:string model_version=2:string id=3:string parameters=4:map<string,InferParameter> ' +
    'inputs=5:ModelInferRequest.InferInputTensor[] outputs=6:ModelInferRequest.InferRequestedOutputTensor[] ' +
    'raw_input_contents=7:bytes[]',
  'ModelInferRequest.InferInputTensor':
    'name=1:string datatype=2:string shape=3:int64[] parameters=4:map<string,InferParameter> contents=5:InferTensorContents',
  'ModelInferRequest.InferRequestedOutputTensor': 'name=1:string parameters=2:map<string,InferParameter>',
  ModelInferResponse:
    'model_name=1:string model_version=2:string id=3:string parameters=4:map<string,InferParameter> ' +
    'outputs=5:ModelInferResponse.InferOutputTensor[] raw_output_contents=6:bytes[]',
  'ModelInferResponse.InferOutputTensor':
    'name=1:string datatype=2:string shape=3:int64[] parameters=4:map<string,InferParameter> contents=5:InferTensorContents',
  ModelStreamInferResponse: 'error_message=1:string infer_response=2:ModelInferResponse',
  ModelConfigRequest: 'name=1:string version=2:string',
  ModelConfigResponse: 'config=1:ModelConfig',
  ModelStatisticsRequest: 'name=1:string version=2:string',
  StatisticDuration: 'count=1:uint64 ns=2:uint64',
  InferStatistics:
    `success=1:${SD} fail=2:${SD} queue=3:${SD} compute_input=4:${SD} compute_infer=5:${SD} ` +
    `compute_output=6:${SD} cache_hit=7:${SD} cache_miss=8:${SD}`,
  InferResponseStatistics:
    `compute_infer=1:${SD} compute_output=2:${SD} success=3:${SD} fail=4:${SD} ` +
    `empty_response=5:${SD} cancel=6:${SD}`,
  InferBatchStatistics: `batch_size=1:uint64 compute_input=2:${SD} compute_infer=3:${SD} compute_output=4:${SD}`,
  MemoryUsage: 'type=1:string id=2:int64 byte_size=3:uint64',
  ModelStatistics:
    'name=1:string version=2:string last_inference=3:uint64 inference_count=4:uint64 execution_count=5:uint64 ' +
    'inference_stats=6:InferStatistics batch_stats=7:InferBatchStatistics[] memory_usage=8:MemoryUsage[] ' +
    'response_stats=9:map<string,InferResponseStatistics>',
  ModelStatisticsResponse: 'model_stats=1:ModelStatistics[]',
  ModelRepositoryParameter:
    'bool_param=1:bool int64_param=2:int64 string_param=3:string bytes_param=4:bytes ' +
    'oneof parameter_choice(bool_param,int64_param,string_param,bytes_param)',
  RepositoryIndexRequest: 'repository_name=1:string ready=2:bool',
  RepositoryIndexResponse: 'models=1:RepositoryIndexResponse.ModelIndex[]',
  'RepositoryIndexResponse.ModelIndex': 'name=1:string version=2:string state=3:string reason=4:string',
  RepositoryModelLoadRequest:
    'repository_name=1:string model_name=2:string parameters=3:map<string,ModelRepositoryParameter>',
  RepositoryModelLoadResponse: '',
  RepositoryModelUnloadRequest:
    'repository_name=1:string model_name=2:string parameters=3:map<string,ModelRepositoryParameter>',
  RepositoryModelUnloadResponse: '',
  SystemSharedMemoryStatusRequest: 'name=1:string',
  SystemSharedMemoryStatusResponse: 'regions=1:map<string,SystemSharedMemoryStatusResponse.RegionStatus>',
  'SystemSharedMemoryStatusResponse.RegionStatus':
    'name=1:string key=2:string offset=3:uint64 byte_size=4:uint64',
  SystemSharedMemoryRegisterRequest: 'name=1:string key=2:string offset=3:uint64 byte_size=4:uint64',
  SystemSharedMemoryRegisterResponse: '',
  SystemSharedMemoryUnregisterRequest: 'name=1:string',
  SystemSharedMemoryUnregisterResponse: '',
  CudaSharedMemoryStatusRequest: 'name=1:string',
  CudaSharedMemoryStatusResponse: 'regions=1:map<string,CudaSharedMemoryStatusResponse.RegionStatus>',
  'CudaSharedMemoryStatusResponse.RegionStatus': 'name=1:string device_id=2:uint64 byte_size=3:uint64',
  CudaSharedMemoryRegisterRequest: 'name=1:string raw_handle=2:bytes device_id=3:int64 byte_size=4:uint64',
  CudaSharedMemoryRegisterResponse: '',
  CudaSharedMemoryUnregisterRequest: 'name=1:string',
  CudaSharedMemoryUnregisterResponse: '',
  TraceSettingRequest: 'settings=1:map<string,TraceSettingRequest.SettingValue> model_name=2:string',
  'TraceSettingRequest.SettingValue': 'value=1:string[]',
  TraceSettingResponse: 'settings=1:map<string,TraceSettingResponse.SettingValue>',
  'TraceSettingResponse.SettingValue': 'value=1:string[]',
  LogSettingsRequest: 'settings=1:map<string,LogSettingsRequest.SettingValue>',
  'LogSettingsRequest.SettingValue':
    'bool_param=1:bool uint32_param=2:uint32 string_param=3:string ' +
    'oneof parameter_choice(bool_param,uint32_param,string_param)',
  LogSettingsResponse: 'settings=1:map<string,LogSettingsResponse.SettingValue>',
  'LogSettingsResponse.SettingValue':
    'bool_param=1:bool uint32_param=2:uint32 string_param=3:string ' +
    'oneof parameter_choice(bool_param,uint32_param,string_param)',
};

// [rpc, request, response, client streaming, server streaming]
const EXPECTED_RPCS: Array<[string, string, string, boolean, boolean]> = [
  ['ServerLive', 'ServerLiveRequest', 'ServerLiveResponse', false, false],
  ['ServerReady', 'ServerReadyRequest', 'ServerReadyResponse', false, false],
  ['ModelReady', 'ModelReadyRequest', 'ModelReadyResponse', false, false],
  ['ServerMetadata', 'ServerMetadataRequest', 'ServerMetadataResponse', false, false],
  ['ModelMetadata', 'ModelMetadataRequest', 'ModelMetadataResponse', false, false],
  ['ModelInfer', 'ModelInferRequest', 'ModelInferResponse', false, false],
  ['ModelStreamInfer', 'ModelInferRequest', 'ModelStreamInferResponse', true, true],
  ['ModelConfig', 'ModelConfigRequest', 'ModelConfigResponse', false, false],
  ['ModelStatistics', 'ModelStatisticsRequest', 'ModelStatisticsResponse', false, false],
  ['RepositoryIndex', 'RepositoryIndexRequest', 'RepositoryIndexResponse', false, false],
  ['RepositoryModelLoad', 'RepositoryModelLoadRequest', 'RepositoryModelLoadResponse', false, false],
  ['RepositoryModelUnload', 'RepositoryModelUnloadRequest', 'RepositoryModelUnloadResponse', false, false],
  ['SystemSharedMemoryStatus', 'SystemSharedMemoryStatusRequest', 'SystemSharedMemoryStatusResponse', false, false],
  ['SystemSharedMemoryRegister', 'SystemSharedMemoryRegisterRequest', 'SystemSharedMemoryRegisterResponse', false, false],
  ['SystemSharedMemoryUnregister', 'SystemSharedMemoryUnregisterRequest', 'SystemSharedMemoryUnregisterResponse', false, false],
  ['CudaSharedMemoryStatus', 'CudaSharedMemoryStatusRequest', 'CudaSharedMemoryStatusResponse', false, false],
  ['CudaSharedMemoryRegister', 'CudaSharedMemoryRegisterRequest', 'CudaSharedMemoryRegisterResponse', false, false],
  ['CudaSharedMemoryUnregister', 'CudaSharedMemoryUnregisterRequest', 'CudaSharedMemoryUnregisterResponse', false, false],
  ['TraceSetting', 'TraceSettingRequest', 'TraceSettingResponse', false, false],
  ['LogSettings', 'LogSettingsRequest', 'LogSettingsResponse', false, false],
];

// ------------------------------------------------------------------- tests

describe('grpc_service.proto: service', () => {
  it('has exactly the Triton RPCs, with matching types and streaming flags (reflection)', () => {
    const svc = root.lookupService('inference.GRPCInferenceService');
    expect(Object.keys(svc.methods).sort()).toEqual(EXPECTED_RPCS.map((r) => r[0]).sort());
    for (const [name, req, res, cs, ss] of EXPECTED_RPCS) {
      const m = svc.methods[name]!;
      expect(shortName(m.resolvedRequestType!.fullName), name).toBe(req);
      expect(shortName(m.resolvedResponseType!.fullName), name).toBe(res);
      expect(!!m.requestStream, `${name} client streaming`).toBe(cs);
      expect(!!m.responseStream, `${name} server streaming`).toBe(ss);
    }
  });

  it('proto-loader exposes every RPC under the /inference.GRPCInferenceService/ path', () => {
    const svc = pkg['inference.GRPCInferenceService'] as protoLoader.ServiceDefinition;
    expect(Object.keys(svc).sort()).toEqual(EXPECTED_RPCS.map((r) => r[0]).sort());
    for (const [name, req, res, cs, ss] of EXPECTED_RPCS) {
      const m = svc[name]!;
      expect(m.path).toBe(`/inference.GRPCInferenceService/${name}`);
      expect(m.requestStream).toBe(cs);
      expect(m.responseStream).toBe(ss);
      expect((m.requestType.type as { name: string }).name).toBe(req.split('.').pop());
      expect((m.responseType.type as { name: string }).name).toBe(res.split('.').pop());
    }
  });
});

describe('grpc_service.proto: messages', () => {
  it('declares package inference and imports model_config.proto for ModelConfig', () => {
    const cfg = root.lookupType('inference.ModelConfigResponse').fields['config']!;
    expect(cfg.resolvedType!.fullName).toBe('.inference.ModelConfig');
  });

  it('every message matches Triton field-for-field (names, numbers, types, maps, oneofs)', () => {
    const ours = allTypes(root.lookup('inference') as protobuf.Namespace).filter((t) =>
      (t.filename ?? '').endsWith('grpc_service.proto'),
    );
    const actual: Record<string, string> = {};
    for (const t of ours) {
      // Map fields are MapField on the owner; protobufjs creates no *Entry types.
      actual[shortName(t.fullName)] = describeType(t);
    }
    expect(Object.keys(actual).sort()).toEqual(Object.keys(EXPECTED_MESSAGES).sort());
    for (const [name, spec] of Object.entries(EXPECTED_MESSAGES)) {
      expect(actual[name], name).toBe(spec);
    }
  });

  it('selected field numbers (spot checks)', () => {
    const id = (type: string, field: string) => root.lookupType(type).fields[field]!.id;
    expect(id('inference.ModelInferRequest', 'raw_input_contents')).toBe(7);
    expect(id('inference.ModelInferResponse', 'raw_output_contents')).toBe(6);
    expect(id('inference.InferTensorContents', 'bytes_contents')).toBe(8);
    expect(id('inference.InferTensorContents', 'fp32_contents')).toBe(6);
    expect(id('inference.ModelStreamInferResponse', 'error_message')).toBe(1);
    expect(id('inference.ModelStreamInferResponse', 'infer_response')).toBe(2);
    expect(id('inference.InferParameter', 'double_param')).toBe(4);
    expect(id('inference.InferParameter', 'uint64_param')).toBe(5);
    expect(id('inference.ModelStatistics', 'last_inference')).toBe(3);
    expect(id('inference.ModelStatistics', 'inference_stats')).toBe(6);
    expect(id('inference.ModelStatistics', 'memory_usage')).toBe(8);
    expect(id('inference.ModelStatistics', 'response_stats')).toBe(9);
    expect(id('inference.InferStatistics', 'cache_miss')).toBe(8);
    expect(id('inference.InferResponseStatistics', 'cancel')).toBe(6);
  });
});

describe('health.proto', () => {
  it('is the standard grpc.health.v1.Health service', () => {
    const svc = root.lookupService('grpc.health.v1.Health');
    expect(Object.keys(svc.methods).sort()).toEqual(['Check', 'Watch']);
    const check = svc.methods['Check']!;
    const watch = svc.methods['Watch']!;
    expect(check.resolvedRequestType!.fullName).toBe('.grpc.health.v1.HealthCheckRequest');
    expect(check.resolvedResponseType!.fullName).toBe('.grpc.health.v1.HealthCheckResponse');
    expect([!!check.requestStream, !!check.responseStream]).toEqual([false, false]);
    expect(watch.resolvedRequestType!.fullName).toBe('.grpc.health.v1.HealthCheckRequest');
    expect([!!watch.requestStream, !!watch.responseStream]).toEqual([false, true]);

    expect(describeType(root.lookupType('grpc.health.v1.HealthCheckRequest'))).toBe('service=1:string');
    expect(describeType(root.lookupType('grpc.health.v1.HealthCheckResponse'))).toBe(
      'status=1:grpc.health.v1.HealthCheckResponse.ServingStatus',
    );
    expect(root.lookupEnum('grpc.health.v1.HealthCheckResponse.ServingStatus').values).toEqual({
      UNKNOWN: 0,
      SERVING: 1,
      NOT_SERVING: 2,
      SERVICE_UNKNOWN: 3,
    });

    const svcDef = pkg['grpc.health.v1.Health'] as protoLoader.ServiceDefinition;
    expect(svcDef['Check']!.path).toBe('/grpc.health.v1.Health/Check');
    expect(svcDef['Watch']!.responseStream).toBe(true);
  });

  it('encodes SERVING as 08 01 and decodes enums as strings', () => {
    const check = (pkg['grpc.health.v1.Health'] as protoLoader.ServiceDefinition)['Check']!;
    expect(hex(check.responseSerialize({ status: 'SERVING' }))).toBe('0801');
    expect(check.responseDeserialize(Buffer.from([0x08, 0x02]))).toEqual({ status: 'NOT_SERVING' });
    expect(check.responseDeserialize(Buffer.alloc(0))).toEqual({ status: 'UNKNOWN' });
  });
});

describe('round trips with the server loader options', () => {
  it('ModelInferRequest with raw contents, typed contents and every InferParameter kind', () => {
    const m = method('ModelInfer');
    const raw0 = Buffer.from(new Float32Array([1, 2, 3, 4]).buffer);
    const raw1 = Buffer.from([0xde, 0xad, 0xbe, 0xef]);
    const req = {
      model_name: 'simple',
      model_version: '1',
      id: 'req-42',
      parameters: {
        flag: { bool_param: true },
        priority: { int64_param: '-9223372036854775808' },
        note: { string_param: 'héllo' },
        ratio: { double_param: 0.125 },
        big: { uint64_param: '18446744073709551615' },
        num: { int64_param: 7 }, // numbers are accepted on the way in
      },
      inputs: [
        { name: 'INPUT0', datatype: 'FP32', shape: ['2', '2'], parameters: { binary_data_size: { int64_param: '16' } } },
        { name: 'INPUT1', datatype: 'UINT8', shape: [4], parameters: {} },
      ],
      outputs: [{ name: 'OUTPUT0', parameters: { classification: { int64_param: '3' } } }],
      raw_input_contents: [raw0, raw1],
    };
    const wire = m.requestSerialize(req);
    const back = m.requestDeserialize(wire) as Record<string, any>;

    expect(back.model_name).toBe('simple');
    expect(back.model_version).toBe('1');
    expect(back.id).toBe('req-42');
    expect(back.parameters).toEqual({
      flag: { bool_param: true, parameter_choice: 'bool_param' },
      priority: { int64_param: '-9223372036854775808', parameter_choice: 'int64_param' },
      note: { string_param: 'héllo', parameter_choice: 'string_param' },
      ratio: { double_param: 0.125, parameter_choice: 'double_param' },
      big: { uint64_param: '18446744073709551615', parameter_choice: 'uint64_param' },
      num: { int64_param: '7', parameter_choice: 'int64_param' },
    });
    expect(back.inputs).toHaveLength(2);
    expect(back.inputs[0]).toMatchObject({ name: 'INPUT0', datatype: 'FP32', shape: ['2', '2'] });
    expect(back.inputs[0].parameters.binary_data_size).toEqual({
      int64_param: '16',
      parameter_choice: 'int64_param',
    });
    expect(back.inputs[0].contents).toBeNull(); // unset message field with defaults: true
    expect(back.inputs[1].shape).toEqual(['4']);
    expect(back.outputs).toEqual([
      { name: 'OUTPUT0', parameters: { classification: { int64_param: '3', parameter_choice: 'int64_param' } } },
    ]);

    // raw_input_contents arrive as Node Buffers (views into the received message).
    expect(back.raw_input_contents).toHaveLength(2);
    for (const b of back.raw_input_contents) expect(Buffer.isBuffer(b)).toBe(true);
    expect(Buffer.compare(back.raw_input_contents[0], raw0)).toBe(0);
    expect(Buffer.compare(back.raw_input_contents[1], raw1)).toBe(0);
    const f32 = back.raw_input_contents[0] as Buffer;
    const copy = new Float32Array(f32.buffer.slice(f32.byteOffset, f32.byteOffset + f32.byteLength));
    expect([...copy]).toEqual([1, 2, 3, 4]);
  });

  it('ModelInferRequest with typed InferTensorContents of every kind', () => {
    const m = method('ModelInfer');
    const contents = {
      bool_contents: [true, false, true],
      int_contents: [-128, 0, 2147483647],
      int64_contents: ['-9223372036854775808', '9007199254740993'],
      uint_contents: [0, 255, 4294967295],
      uint64_contents: ['18446744073709551615', '1'],
      fp32_contents: [0.5, -2.25],
      fp64_contents: [Math.PI, -1e300],
      bytes_contents: [Buffer.from('abc'), Buffer.from([0, 1, 2])],
    };
    const back = m.requestDeserialize(
      m.requestSerialize({ model_name: 'x', inputs: [{ name: 'I', datatype: 'BYTES', shape: [2], contents }] }),
    ) as Record<string, any>;
    const c = back.inputs[0].contents;
    expect(c.bool_contents).toEqual(contents.bool_contents);
    expect(c.int_contents).toEqual(contents.int_contents);
    expect(c.int64_contents).toEqual(contents.int64_contents);
    expect(c.uint_contents).toEqual(contents.uint_contents);
    expect(c.uint64_contents).toEqual(contents.uint64_contents);
    expect(c.fp32_contents).toEqual(contents.fp32_contents);
    expect(c.fp64_contents).toEqual(contents.fp64_contents);
    expect(c.bytes_contents.map((b: Buffer) => hex(b))).toEqual(['616263', '000102']);
    expect(back.raw_input_contents).toEqual([]);
  });

  it('ModelStreamInferResponse carrying a ModelInferResponse with raw outputs', () => {
    const m = method('ModelStreamInfer');
    const out = Buffer.from(new Int32Array([5, -6]).buffer);
    const res = {
      error_message: '',
      infer_response: {
        model_name: 'm',
        model_version: '3',
        id: 'a',
        parameters: { triton_final_response: { bool_param: true } },
        outputs: [{ name: 'OUT', datatype: 'INT32', shape: [1, 2] }],
        raw_output_contents: [out],
      },
    };
    const back = m.responseDeserialize(m.responseSerialize(res)) as Record<string, any>;
    expect(back.error_message).toBe('');
    expect(back.infer_response.outputs[0]).toMatchObject({ name: 'OUT', datatype: 'INT32', shape: ['1', '2'] });
    expect(back.infer_response.parameters.triton_final_response.bool_param).toBe(true);
    expect(Buffer.compare(back.infer_response.raw_output_contents[0], out)).toBe(0);

    const err = m.responseDeserialize(m.responseSerialize({ error_message: 'boom' })) as Record<string, any>;
    expect(err.error_message).toBe('boom');
    expect(err.infer_response).toBeNull();
  });

  it('statistics, repository, shm and log messages', () => {
    const stats = method('ModelStatistics');
    const s = stats.responseDeserialize(
      stats.responseSerialize({
        model_stats: [
          {
            name: 'm',
            version: '1',
            last_inference: 1_700_000_000_123,
            inference_count: '10',
            execution_count: 4n, // bigint is accepted too
            inference_stats: { success: { count: 10, ns: '123456789012' } },
            batch_stats: [{ batch_size: 8, compute_infer: { count: 1, ns: 5 } }],
            memory_usage: [{ type: 'GPU', id: 0, byte_size: '1024' }],
            response_stats: { '0': { success: { count: 1, ns: 2 }, cancel: { count: 0, ns: 0 } } },
          },
        ],
      }),
    ) as Record<string, any>;
    const ms = s.model_stats[0];
    expect(ms.last_inference).toBe('1700000000123');
    expect(ms.inference_count).toBe('10');
    expect(ms.execution_count).toBe('4');
    expect(ms.inference_stats.success).toEqual({ count: '10', ns: '123456789012' });
    expect(ms.inference_stats.fail).toBeNull();
    expect(ms.batch_stats[0].batch_size).toBe('8');
    expect(ms.memory_usage[0]).toEqual({ type: 'GPU', id: '0', byte_size: '1024' });
    expect(ms.response_stats['0'].cancel).toEqual({ count: '0', ns: '0' });

    const load = method('RepositoryModelLoad');
    const l = load.requestDeserialize(
      load.requestSerialize({
        model_name: 'm',
        parameters: {
          config: { string_param: '{"backend":"onnxruntime"}' },
          'file:1/model.onnx': { bytes_param: Buffer.from([8, 7, 6]) },
        },
      }),
    ) as Record<string, any>;
    expect(l.parameters.config).toEqual({ string_param: '{"backend":"onnxruntime"}', parameter_choice: 'string_param' });
    expect(l.parameters['file:1/model.onnx'].parameter_choice).toBe('bytes_param');
    expect(hex(l.parameters['file:1/model.onnx'].bytes_param)).toBe('080706');

    const shm = method('SystemSharedMemoryStatus');
    const r = shm.responseDeserialize(
      shm.responseSerialize({ regions: { r0: { name: 'r0', key: '/k', offset: 0, byte_size: 64 } } }),
    ) as Record<string, any>;
    expect(r.regions.r0).toEqual({ name: 'r0', key: '/k', offset: '0', byte_size: '64' });

    const log = method('LogSettings');
    const g = log.responseDeserialize(
      log.responseSerialize({ settings: { log_verbose_level: { uint32_param: 2 }, log_info: { bool_param: false } } }),
    ) as Record<string, any>;
    expect(g.settings.log_verbose_level).toEqual({ uint32_param: 2, parameter_choice: 'uint32_param' });
    // A oneof member set to its default value is still present on the wire.
    expect(g.settings.log_info).toEqual({ bool_param: false, parameter_choice: 'bool_param' });
  });
});

describe('hand-computed wire bytes (protobuf encoding, independent of any library)', () => {
  // tag byte = (field_number << 3) | wire_type; wire types: 0 varint, 1 fixed64,
  // 2 length-delimited, 5 fixed32.
  it('ServerLiveResponse{live:true} = 08 01; empty request = no bytes', () => {
    const m = method('ServerLive');
    expect(hex(m.responseSerialize({ live: true }))).toBe('0801');
    expect(hex(m.requestSerialize({}))).toBe('');
    expect(hex(m.responseSerialize({}))).toBe(''); // unset field: nothing on the wire
    // protobufjs writes an explicitly-set default (C++ protobuf would omit it);
    // both forms are valid proto3 and decode to the same value.
    expect(hex(m.responseSerialize({ live: false }))).toBe('0800');
    expect(m.responseDeserialize(Buffer.from([0x08, 0x00]))).toEqual({ live: false });
    expect(m.responseDeserialize(Buffer.alloc(0))).toEqual({ live: false });
    expect(m.responseDeserialize(Buffer.from([0x08, 0x01]))).toEqual({ live: true });
  });

  it('ModelInferRequest{model_name:"m", parameters{"a":bool true}, raw_input_contents:[01 02]}', () => {
    const m = method('ModelInfer');
    // 0a 01 6d                      field 1 (model_name), len 1, "m"
    // 22 07 | 0a 01 61 12 02 08 01   field 4 map entry: key(1)="a", value(2)=InferParameter{bool_param(1)=1}
    // 3a 02 01 02                   field 7 (raw_input_contents), len 2
    const expected = '0a016d' + '2207' + '0a0161' + '12020801' + '3a020102';
    const bytes = m.requestSerialize({
      model_name: 'm',
      parameters: { a: { bool_param: true } },
      raw_input_contents: [Buffer.from([1, 2])],
    });
    expect(hex(bytes)).toBe(expected);
    const back = m.requestDeserialize(Buffer.from(expected, 'hex')) as Record<string, any>;
    expect(back.model_name).toBe('m');
    expect(back.parameters.a.bool_param).toBe(true);
    expect(hex(back.raw_input_contents[0])).toBe('0102');
  });

  it('InferTensorContents packs repeated scalars (fp32 1.0 -> 32 04 00 00 80 3f)', () => {
    const t = root.lookupType('inference.InferTensorContents');
    expect(hex(t.encode(t.fromObject({ fp32_contents: [1.0] })).finish())).toBe('320400' + '00803f');
    // bytes_contents is not packable: one tag per element, field 8 wire type 2 = 0x42.
    expect(hex(t.encode(t.fromObject({ bytes_contents: [Buffer.from('a'), Buffer.from('')] })).finish())).toBe(
      '420161' + '4200',
    );
  });

  it('ModelStreamInferResponse{error_message:"x"} = 0a 01 78; InferParameter{int64_param:-1} = 10 + 10-byte varint', () => {
    const s = method('ModelStreamInfer');
    expect(hex(s.responseSerialize({ error_message: 'x' }))).toBe('0a0178');
    const p = root.lookupType('inference.InferParameter');
    expect(hex(p.encode(p.fromObject({ int64_param: -1 })).finish())).toBe('10' + 'ff'.repeat(9) + '01');
    // double_param (field 4, fixed64 -> tag 0x21), 1.0 = 00 00 00 00 00 00 f0 3f
    expect(hex(p.encode(p.fromObject({ double_param: 1 })).finish())).toBe('21000000000000f03f');
  });
});

describe('grpc-js end to end (loopback)', () => {
  it('serves ServerLive, ModelInfer (raw bytes) and health Check/Watch over a real channel', async () => {
    const loaded = grpc.loadPackageDefinition(pkg) as any;
    const server = new grpc.Server();
    server.addService(loaded.inference.GRPCInferenceService.service, {
      ServerLive: (_call: unknown, cb: grpc.sendUnaryData<object>) => cb(null, { live: true }),
      ModelInfer: (call: grpc.ServerUnaryCall<any, object>, cb: grpc.sendUnaryData<object>) => {
        const raw = call.request.raw_input_contents[0] as Buffer;
        cb(null, {
          model_name: call.request.model_name,
          id: call.request.id,
          outputs: [{ name: 'OUT', datatype: 'UINT8', shape: [raw.length] }],
          raw_output_contents: [Buffer.from(raw.map((b) => b * 2))],
        });
      },
    });
    server.addService(loaded.grpc.health.v1.Health.service, {
      Check: (_call: unknown, cb: grpc.sendUnaryData<object>) => cb(null, { status: 'SERVING' }),
      Watch: (call: grpc.ServerWritableStream<object, object>) => {
        call.write({ status: 'SERVING' });
        call.end();
      },
    });
    const port = await new Promise<number>((res, rej) =>
      server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? rej(e) : res(p))),
    );
    const addr = `127.0.0.1:${port}`;
    const client = new loaded.inference.GRPCInferenceService(addr, grpc.credentials.createInsecure());
    const health = new loaded.grpc.health.v1.Health(addr, grpc.credentials.createInsecure());
    const unary = (c: any, name: string, req: object) =>
      new Promise<any>((res, rej) => c[name](req, (e: Error | null, r: any) => (e ? rej(e) : res(r))));
    try {
      expect(await unary(client, 'ServerLive', {})).toEqual({ live: true });
      const r = await unary(client, 'ModelInfer', {
        model_name: 'dbl',
        id: '9',
        inputs: [{ name: 'IN', datatype: 'UINT8', shape: [3] }],
        raw_input_contents: [Buffer.from([1, 2, 3])],
      });
      expect(r.model_name).toBe('dbl');
      expect(r.id).toBe('9');
      expect(r.outputs[0].shape).toEqual(['3']);
      expect(Buffer.isBuffer(r.raw_output_contents[0])).toBe(true);
      expect([...r.raw_output_contents[0]]).toEqual([2, 4, 6]);
      // RPCs left unimplemented answer UNIMPLEMENTED.
      await expect(unary(client, 'TraceSetting', {})).rejects.toMatchObject({ code: grpc.status.UNIMPLEMENTED });

      expect(await unary(health, 'Check', { service: '' })).toEqual({ status: 'SERVING' });
      const seen: unknown[] = [];
      await new Promise<void>((res, rej) => {
        const w = health.Watch({ service: '' });
        w.on('data', (d: unknown) => seen.push(d));
        w.on('end', () => res());
        w.on('error', rej);
      });
      expect(seen).toEqual([{ status: 'SERVING' }]);
    } finally {
      client.close();
      health.close();
      await new Promise<void>((res) => server.tryShutdown(() => res()));
    }
  });
});
